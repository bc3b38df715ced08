//! Calls from runtime threads into Java: loss notices and async completions.
//!
//! Runtime threads attach to the JVM once, as daemons (so they never keep it
//! alive), and run each call inside a local frame: they never return to
//! Java, so local references would otherwise pile up.

use std::sync::OnceLock;

use jni::objects::{GlobalRef, JObject, JValue};
use jni::{JNIEnv, JavaVM};

use crate::errors::{self, Failure, Outcome};

static VM: OnceLock<JavaVM> = OnceLock::new();

pub(crate) fn init_vm(env: &JNIEnv) -> Outcome<()> {
    if VM.get().is_none() {
        let _ = VM.set(env.get_java_vm()?);
    }
    Ok(())
}

/// Runs `call` on this (runtime) thread's JNI env. A Java exception thrown
/// by the callee is described and cleared: there is no Java caller to get it.
pub(crate) fn with_env(call: impl for<'l> FnOnce(&mut JNIEnv<'l>) -> Outcome<()>) {
    let Some(vm) = VM.get() else { return };
    let Ok(mut env) = vm.attach_current_thread_as_daemon() else { return };
    let _ = env.with_local_frame(8, |env| -> Outcome<()> {
        let _ = call(env);
        if env.exception_check().unwrap_or(false) {
            let _ = env.exception_describe();
            let _ = env.exception_clear();
        }
        Ok(())
    });
}

/// `watch.lost(owner, reason)`: an `io.polylock.HoldWatch`, the lost grant's.
pub(crate) fn notify_lost(watch: &GlobalRef, owner: u64, reason: &str) {
    with_env(|env| {
        let reason = env.new_string(reason)?;
        env.call_method(
            watch,
            "lost",
            "(JLjava/lang/String;)V",
            &[JValue::Long(owner as i64), JValue::Object(&reason)],
        )?;
        Ok(())
    });
}

/// `completion.done(token, error)`: an `io.polylock.AsyncAcquire`; `error`
/// is null on success.
pub(crate) fn complete(completion: &GlobalRef, result: Result<u64, Failure>) {
    with_env(|env| {
        let (token, error) = match result {
            Ok(token) => (token as i64, JObject::null()),
            Err(f) => (-1, errors::to_throwable(env, f)?),
        };
        env.call_method(
            completion,
            "done",
            "(JLjava/lang/Throwable;)V",
            &[JValue::Long(token), JValue::Object(&error)],
        )?;
        Ok(())
    });
}
