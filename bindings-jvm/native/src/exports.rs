//! The `native` methods of `io.polylock.Native`, one function each.
//! Bodies stay thin: they decode arguments, call the runtime, and encode.

use std::sync::Arc;
use std::time::Duration;

use jni::objects::{JClass, JObject, JString};
use jni::sys::{jboolean, jint, jlong, jstring, JNI_FALSE, JNI_TRUE};
use jni::JNIEnv;
use polylock::{Client, ClientOptions, Error, LockOptions, OwnerId};

use crate::acquire::{self, PendingAcquire, PendingAsync};
use crate::errors::{self, guarded, Outcome};
use crate::handles::{self, ClientHandle, LockHandle, SemaphoreHandle};
use crate::permits::{self, PendingPermits};
use crate::runtime;

/// Java passes `Long.MIN_VALUE` for "not set".
pub(crate) const UNSET: jlong = jlong::MIN;

pub(crate) fn string(env: &mut JNIEnv, s: &JString) -> Outcome<String> {
    Ok(env.get_string(s)?.into())
}

/// Millis from Java; zero or negative become zero, which the runtime
/// rejects as an invalid option with its own message.
pub(crate) fn millis(ms: jlong) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// A number of permits from Java's `int`: a negative one is an invalid
/// option (zero and too many are the runtime's to refuse).
fn permit_count(what: &str, n: jint) -> Outcome<u32> {
    u32::try_from(n).map_err(|_| Error::InvalidOption(format!("{what} must not be negative, not {n}")).into())
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_init<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>) {
    guarded(&mut env, (), |env| {
        errors::init_classes(env)?;
        crate::upcalls::init_vm(env)
    })
}

/// A Java thread's owner id, from the runtime's process-wide allocator (ids
/// count up from 1: a positive `long`).
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_freshOwnerId<'l>(_env: JNIEnv<'l>, _c: JClass<'l>) -> jlong {
    OwnerId::fresh().0 as jlong
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_clientConnect<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    url: JString<'l>,
    connect_timeout_ms: jlong,
    request_timeout_ms: jlong,
    session_timeout_ms: jlong,
    lease_ms: jlong,
    debug_faults: jboolean,
) -> jlong {
    guarded(&mut env, 0, |env| {
        let url = string(env, &url)?;
        #[cfg(feature = "test-hooks")]
        let mut opts = ClientOptions { debug_faults: debug_faults == JNI_TRUE, ..ClientOptions::default() };
        #[cfg(not(feature = "test-hooks"))]
        let mut opts = if debug_faults == JNI_TRUE {
            return Err(polylock::test_hooks_missing("debugFaults").into());
        } else {
            ClientOptions::default()
        };
        for (field, ms) in [
            (&mut opts.connect_timeout, connect_timeout_ms),
            (&mut opts.request_timeout, request_timeout_ms),
            (&mut opts.session_timeout, session_timeout_ms),
            (&mut opts.lease, lease_ms),
        ] {
            if ms != UNSET {
                *field = millis(ms);
            }
        }
        let client = runtime::block_on(Client::connect_with(&url, opts))?;
        Ok(handles::into_handle(ClientHandle { client }))
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_clientClose<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>, client: jlong) {
    guarded(&mut env, (), |_| {
        if let Some(h) = handles::free::<ClientHandle>(client) {
            runtime::block_on(h.client.close());
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_clientBackend<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    client: jlong,
) -> jstring {
    guarded(&mut env, std::ptr::null_mut(), |env| {
        let h = handles::get::<ClientHandle>(client)?;
        Ok(env.new_string(h.client.backend().as_str())?.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_clientId<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    client: jlong,
) -> jstring {
    guarded(&mut env, std::ptr::null_mut(), |env| {
        let h = handles::get::<ClientHandle>(client)?;
        Ok(env.new_string(h.client.id())?.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_clientExpireSession<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    client: jlong,
) {
    guarded(&mut env, (), |_| {
        let h = handles::get::<ClientHandle>(client)?;
        #[cfg(feature = "test-hooks")]
        return Ok(runtime::block_on(h.client.debug_expire_session())?);
        #[cfg(not(feature = "test-hooks"))]
        {
            let _ = h;
            Err(polylock::test_hooks_missing("expireSession").into())
        }
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_lockNew<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    client: jlong,
    name: JString<'l>,
    lease_ms: jlong,
) -> jlong {
    guarded(&mut env, 0, |env| {
        let h = handles::get::<ClientHandle>(client)?;
        let name = string(env, &name)?;
        let lease = (lease_ms != UNSET).then(|| millis(lease_ms));
        let lock = h.client.lock_with(&name, LockOptions { lease, ..Default::default() })?;
        Ok(handles::into_handle(LockHandle::new(lock)))
    })
}

/// One half of the read-write lock `name`: the write half if `write`.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_lockNewReadWrite<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    client: jlong,
    name: JString<'l>,
    lease_ms: jlong,
    write: jboolean,
) -> jlong {
    guarded(&mut env, 0, |env| {
        let h = handles::get::<ClientHandle>(client)?;
        let name = string(env, &name)?;
        let lease = (lease_ms != UNSET).then(|| millis(lease_ms));
        let rw = h.client.rw_lock_with(&name, LockOptions { lease, ..Default::default() })?;
        let half = if write != 0 { rw.write() } else { rw.read() };
        Ok(handles::into_handle(LockHandle::new(half.clone())))
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_lockFree<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>, lock: jlong) {
    guarded(&mut env, (), |_| {
        handles::free::<LockHandle>(lock);
        Ok(())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_lockHoldCount<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    lock: jlong,
    owner: jlong,
) -> jint {
    guarded(&mut env, 0, |_| {
        let h = handles::get::<LockHandle>(lock)?;
        Ok(h.lock.hold_count(OwnerId(owner as u64)).min(i32::MAX as u32) as jint)
    })
}

/// The fencing token of `owner`'s current grant, or -1 if it holds none.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_lockFencingToken<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    lock: jlong,
    owner: jlong,
) -> jlong {
    guarded(&mut env, -1, |_| {
        let h = handles::get::<LockHandle>(lock)?;
        Ok(h.lock.hold(OwnerId(owner as u64)).map_or(-1, |hold| hold.token as jlong))
    })
}

/// How many holds `owner` has of its current grant if that grant's fencing
/// token is `token`, else 0 (a lost grant is no longer current): whether an
/// unlock ends the grant Java watches.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_lockGrantHoldCount<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    lock: jlong,
    owner: jlong,
    token: jlong,
) -> jint {
    guarded(&mut env, 0, |_| {
        let h = handles::get::<LockHandle>(lock)?;
        let hold = h.lock.hold(OwnerId(owner as u64)).filter(|hold| hold.token as jlong == token);
        Ok(hold.map_or(0, |hold| hold.count.min(i32::MAX as u32) as jint))
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_lockHeldLocally<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    lock: jlong,
) -> jboolean {
    guarded(&mut env, JNI_FALSE, |_| {
        let h = handles::get::<LockHandle>(lock)?;
        Ok(if h.lock.is_held_locally() { JNI_TRUE } else { JNI_FALSE })
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_lockHolderId<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    lock: jlong,
    owner: jlong,
) -> jstring {
    guarded(&mut env, std::ptr::null_mut(), |env| {
        let h = handles::get::<LockHandle>(lock)?;
        Ok(env.new_string(h.lock.holder_id(OwnerId(owner as u64)))?.into_raw())
    })
}

/// Ends one hold of `owner`, waiting for the server. The runtime reports a
/// lost hold as `Error::Lost` once per hold (`LockLostException`), then
/// `NotHeld` (`IllegalMonitorStateException`).
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_release<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    lock: jlong,
    owner: jlong,
) {
    guarded(&mut env, (), |_| {
        let h = handles::get::<LockHandle>(lock)?;
        Ok(runtime::block_on(h.lock.release_as(OwnerId(owner as u64)))?)
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_acquireStart<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    lock: jlong,
    owner: jlong,
    timeout_nanos: jlong,
) -> jlong {
    guarded(&mut env, 0, |_| {
        let h = handles::get::<LockHandle>(lock)?;
        Ok(handles::into_handle(acquire::start(h, owner as u64, timeout_nanos)))
    })
}

/// The fencing token (>= 0), -1 still waiting, -2 not granted in time.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_acquireWait<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    pending: jlong,
    millis: jlong,
    watch: JObject<'l>,
) -> jlong {
    guarded(&mut env, acquire::NOT_GRANTED, |env| {
        let p: Arc<PendingAcquire> = handles::get(pending)?;
        let watch = env.new_global_ref(watch)?;
        p.wait(millis, watch)
    })
}

/// Cancels the acquire if it still runs, then frees the handle.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_acquireFree<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>, pending: jlong) {
    guarded(&mut env, (), |_| {
        if let Some(p) = handles::free::<PendingAcquire>(pending) {
            p.cancel();
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_acquireAsync<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    lock: jlong,
    owner: jlong,
    completion: JObject<'l>,
    watch: JObject<'l>,
) -> jlong {
    guarded(&mut env, 0, |env| {
        let h = handles::get::<LockHandle>(lock)?;
        let completion = env.new_global_ref(completion)?;
        let watch = env.new_global_ref(watch)?;
        Ok(handles::into_handle(acquire::start_async(h, owner as u64, completion, watch)))
    })
}

/// Cancels an async acquire unless it completed, then frees the handle.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_asyncFree<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>, pending: jlong) {
    guarded(&mut env, (), |_| {
        if let Some(p) = handles::free::<PendingAsync>(pending) {
            p.cancel();
        }
        Ok(())
    })
}

/// The semaphore `name` of `permits` permits.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semNew<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    client: jlong,
    name: JString<'l>,
    permits: jint,
    lease_ms: jlong,
) -> jlong {
    guarded(&mut env, 0, |env| {
        let h = handles::get::<ClientHandle>(client)?;
        let name = string(env, &name)?;
        let permits = permit_count("the number of permits", permits)?;
        let lease = (lease_ms != UNSET).then(|| millis(lease_ms));
        let sem = h.client.semaphore_with(&name, permits, LockOptions { lease, ..Default::default() })?;
        Ok(handles::into_handle(SemaphoreHandle { sem }))
    })
}

/// Frees a semaphore handle. Grants still held in it are given back in the
/// background (nobody could release them any more).
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semFree<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>, sem: jlong) {
    guarded(&mut env, (), |_| {
        handles::free::<SemaphoreHandle>(sem);
        Ok(())
    })
}

/// Gives back `count` permits held in the semaphore, newest grants first,
/// waiting for the server.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semRelease<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    sem: jlong,
    count: jint,
) {
    guarded(&mut env, (), |_| {
        let h = handles::get::<SemaphoreHandle>(sem)?;
        let count = permit_count("a permit count", count)?;
        Ok(runtime::block_on(h.sem.release(count))?)
    })
}

/// The fencing token of the newest grant held in the semaphore, or -1.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semNewestToken<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    sem: jlong,
) -> jlong {
    guarded(&mut env, -1, |_| {
        let h = handles::get::<SemaphoreHandle>(sem)?;
        Ok(h.sem.newest_token().map_or(-1, |t| t as jlong))
    })
}

/// The permits free on the server now, by every client.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semAvailable<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    sem: jlong,
) -> jint {
    guarded(&mut env, 0, |_| {
        let h = handles::get::<SemaphoreHandle>(sem)?;
        Ok(runtime::block_on(h.sem.available_permits())?.min(i32::MAX as u32) as jint)
    })
}

/// Permits held in the semaphore (by every thread that uses it).
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semHeldPermits<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    sem: jlong,
) -> jint {
    guarded(&mut env, 0, |_| {
        let h = handles::get::<SemaphoreHandle>(sem)?;
        Ok(h.sem.held_permits().min(i32::MAX as u32) as jint)
    })
}

/// Starts an acquire of `count` permits; returns its pending handle.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semAcquireStart<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    sem: jlong,
    count: jint,
    timeout_nanos: jlong,
) -> jlong {
    guarded(&mut env, 0, |_| {
        let h = handles::get::<SemaphoreHandle>(sem)?;
        let count = permit_count("a permit count", count)?;
        Ok(handles::into_handle(permits::start(h, count, timeout_nanos)))
    })
}

/// The fencing token (>= 0), -1 still waiting, -2 not granted in time.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semAcquireWait<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    pending: jlong,
    millis: jlong,
) -> jlong {
    guarded(&mut env, acquire::NOT_GRANTED, |_| {
        let p: Arc<PendingPermits> = handles::get(pending)?;
        p.wait(millis)
    })
}

/// Withdraws the acquire if it still runs: the token of a grant that raced
/// the cancel (held in the semaphore), or -2.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semAcquireCancel<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    pending: jlong,
) -> jlong {
    guarded(&mut env, acquire::NOT_GRANTED, |_| {
        let p: Arc<PendingPermits> = handles::get(pending)?;
        Ok(p.cancel())
    })
}

/// Cancels the acquire if it still runs, then frees the handle.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_semAcquireFree<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>, pending: jlong) {
    guarded(&mut env, (), |_| {
        if let Some(p) = handles::free::<PendingPermits>(pending) {
            p.cancel();
        }
        Ok(())
    })
}
