'use strict'
// The polylock package: the API of api.js over the napi addon (native.js).
module.exports = require('./api.js')(require('./native.js'))
