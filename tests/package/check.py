"""Install test of the wheel (scripts/package test): takes and releases a lock
on every server URL given, with the polylock imported from the installed
wheel, and prints one line per server."""

import os
import sys

import polylock

assert "bindings-python" not in polylock.__file__, f"polylock from the source tree: {polylock.__file__}"
for url in sys.argv[1:]:
    name = f"package-test/python-{os.getpid()}"
    with polylock.connect(url) as client:
        lock = client.lock(name)
        with lock:
            assert lock.held, "not held inside `with`"
            token = lock.fencing_token
            assert token > 0, f"fencing token {token}"
            assert client.status(name).held, "the server does not see the lock held"
        assert not lock.held, "still held after `with`"
        assert not client.status(name).held, "the server still sees the lock held"
    print(f"python {url.split(':')[0]}: acquired (fencing token {token}) and released")

# A release wheel is built without the test hooks: asking for one is a clear
# error, before any connection is made.
try:
    polylock.connect(sys.argv[1], _debug_faults=True)
except ValueError as e:
    assert "test-hooks" in str(e), f"unclear error: {e}"
else:
    raise AssertionError("the release wheel has the test hooks compiled in")
print("python: no test hooks in the release wheel")
