'use strict'
// `polylock/wasm`: the same API as `polylock` (api.js) over the core's lock
// table compiled to WebAssembly and ioredis (wasm-native.js). Loads no
// native addon; Redis only.
module.exports = require('./api.js')(require('./wasm-native.js'))
