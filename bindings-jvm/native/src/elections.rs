//! The `native` methods of `io.polylock.Native` behind `LeaderElection`:
//! an election handle (no I/O), the leader as the server records it, and
//! one campaign per `start()` ([`crate::campaign`]).

use std::sync::Arc;

use jni::objects::{JClass, JObject, JString, JValue};
use jni::sys::{jlong, jobject};
use jni::JNIEnv;
use polylock::LockOptions;

use crate::campaign::{self, Campaign, ElectionHandle};
use crate::errors::guarded;
use crate::exports::{millis, string, UNSET};
use crate::handles::{self, ClientHandle};
use crate::runtime;

/// The election `name` of a client (`leaseMs`: `UNSET` for the client's lease).
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_electionNew<'l>(
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
        let election = h.client.election_with(&name, LockOptions { lease, ..Default::default() })?;
        Ok(handles::into_handle(ElectionHandle { election }))
    })
}

#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_electionFree<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>, election: jlong) {
    guarded(&mut env, (), |_| {
        handles::free::<ElectionHandle>(election);
        Ok(())
    })
}

/// Who leads now, by every client (one read of the server): a new
/// `LeaderElection.Leader(id, term)` (term -1 where the server has none), or null.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_electionLeader<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    election: jlong,
) -> jobject {
    guarded(&mut env, std::ptr::null_mut(), |env| {
        let h = handles::get::<ElectionHandle>(election)?;
        let Some(leader) = runtime::block_on(h.election.leader())? else {
            return Ok(std::ptr::null_mut());
        };
        let id = env.new_string(&leader.participant)?;
        let term = leader.term.map_or(-1, |t| t as jlong);
        let leader = env.new_object(
            "io/polylock/LeaderElection$Leader",
            "(Ljava/lang/String;J)V",
            &[JValue::Object(&id), JValue::Long(term)],
        )?;
        Ok(leader.into_raw())
    })
}

/// Starts taking part in the election; `events` (the `LeaderElection`) hears
/// of each leadership and its loss. Returns the campaign's handle.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_campaignStart<'l>(
    mut env: JNIEnv<'l>,
    _c: JClass<'l>,
    election: jlong,
    events: JObject<'l>,
) -> jlong {
    guarded(&mut env, 0, |env| {
        let h: Arc<ElectionHandle> = handles::get(election)?;
        let events = env.new_global_ref(events)?;
        Ok(handles::into_handle(campaign::start(h, events)))
    })
}

/// Withdraws or resigns, waiting for the server, then frees the handle.
#[no_mangle]
pub extern "system" fn Java_io_polylock_Native_campaignEnd<'l>(mut env: JNIEnv<'l>, _c: JClass<'l>, campaign: jlong) {
    guarded(&mut env, (), |_| match handles::free::<Campaign>(campaign) {
        Some(c) => c.end(),
        None => Ok(()),
    })
}
