//! Rust failures -> Java exceptions, in one place.
//!
//! The exception classes are looked up once, from a Java thread, in
//! `Native.init` (so the application's class loader finds ours), and kept
//! as global references: runtime threads that call back into Java cannot
//! rely on `FindClass`.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use jni::objects::{GlobalRef, JObject, JThrowable, JValue, JValueOwned};
use jni::JNIEnv;
use polylock::Error;

/// Everything an export can fail with.
pub(crate) enum Failure {
    Polylock(Error),
    /// A JNI call failed; it may have left a Java exception pending already.
    Jni(jni::errors::Error),
    /// A misuse of a handle by the Java side (a bug there, not the user's).
    Illegal(String),
    Panic(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Polylock(e)
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Self {
        Failure::Jni(e)
    }
}

pub(crate) type Outcome<T> = Result<T, Failure>;

/// The Java classes failures map to.
pub(crate) struct Classes {
    lock: GlobalRef,
    connect: GlobalRef,
    lost: GlobalRef,
    closed: GlobalRef,
    unavailable: GlobalRef,
    upgrade_refused: GlobalRef,
    permits_mismatch: GlobalRef,
    illegal_argument: GlobalRef,
    illegal_monitor: GlobalRef,
    illegal_state: GlobalRef,
}

static CLASSES: OnceLock<Classes> = OnceLock::new();

pub(crate) fn init_classes(env: &mut JNIEnv) -> Outcome<()> {
    if CLASSES.get().is_some() {
        return Ok(());
    }
    let mut global = |name: &str| -> Outcome<GlobalRef> {
        let class = env.find_class(name)?;
        Ok(env.new_global_ref(class)?)
    };
    let classes = Classes {
        lock: global("io/polylock/LockException")?,
        connect: global("io/polylock/LockConnectException")?,
        lost: global("io/polylock/LockLostException")?,
        closed: global("io/polylock/LockClosedException")?,
        unavailable: global("io/polylock/LockUnavailableException")?,
        upgrade_refused: global("io/polylock/LockUpgradeRefusedException")?,
        permits_mismatch: global("io/polylock/LockPermitsMismatchException")?,
        illegal_argument: global("java/lang/IllegalArgumentException")?,
        illegal_monitor: global("java/lang/IllegalMonitorStateException")?,
        illegal_state: global("java/lang/IllegalStateException")?,
    };
    let _ = CLASSES.set(classes);
    Ok(())
}

/// A structured field of an exception, passed to its constructor after the message.
enum Field {
    /// A `String` parameter (null where the runtime has none).
    Str(Option<String>),
    /// An `int` parameter.
    Int(i32),
}

/// The class a failure becomes in Java, its message, and the structured
/// fields its constructor takes after the message (`(String, ...)`, each
/// field a `String` or an `int`): the binding's one error table.
fn classify(failure: &Failure) -> (&'static GlobalRef, String, Vec<Field>) {
    use polylock::ErrorKind as K;
    let c = CLASSES.get().expect("Native.init runs before any other native call");
    let owned = |v: Option<&str>| Field::Str(v.map(str::to_owned));
    let int = |v: u32| Field::Int(v.min(i32::MAX as u32) as i32);
    match failure {
        Failure::Polylock(e) => {
            let (class, fields) = match e.kind() {
                K::InvalidUrl | K::InvalidName | K::InvalidOption => (&c.illegal_argument, vec![]),
                K::Connect => (&c.connect, vec![owned(e.address())]),
                K::NotHeld => (&c.illegal_monitor, vec![]),
                K::Lost => (&c.lost, vec![owned(e.lock_name()), Field::Str(e.reason())]),
                K::Closed => (&c.closed, vec![]),
                K::Unavailable => (&c.unavailable, vec![owned(e.reply())]),
                K::UpgradeRefused => (&c.upgrade_refused, vec![owned(e.lock_name())]),
                K::PermitsMismatch => {
                    let (server, ours) = e.permits().unwrap_or_default();
                    (&c.permits_mismatch, vec![owned(e.lock_name()), int(server), int(ours)])
                }
                _ => (&c.lock, vec![]),
            };
            (class, e.to_string(), fields)
        }
        Failure::Jni(e) => (&c.lock, format!("JNI call failed: {e}"), vec![]),
        Failure::Illegal(m) => (&c.illegal_state, m.clone(), vec![]),
        Failure::Panic(m) => (&c.lock, format!("internal error in polylock: {m}"), vec![]),
    }
}

/// Raises `failure` in Java unless a Java exception is already pending
/// (a failed JNI call leaves one): never two exceptions for one failure.
pub(crate) fn throw(env: &mut JNIEnv, failure: Failure) {
    if env.exception_check().unwrap_or(true) {
        return;
    }
    if let Ok(throwable) = to_throwable(env, failure) {
        let _ = env.throw(JThrowable::from(throwable));
    }
}

/// Builds (without throwing) the Java exception for `failure`, for
/// completions delivered to Java from runtime threads.
pub(crate) fn to_throwable<'l>(env: &mut JNIEnv<'l>, failure: Failure) -> Outcome<JObject<'l>> {
    let (class, message, fields) = classify(&failure);
    let mut signature = String::from("(Ljava/lang/String;");
    let mut args = vec![JValueOwned::Object(env.new_string(message)?.into())];
    for field in fields {
        args.push(match field {
            Field::Str(v) => {
                signature.push_str("Ljava/lang/String;");
                JValueOwned::Object(match v {
                    Some(v) => env.new_string(v)?.into(),
                    None => JObject::null(),
                })
            }
            Field::Int(n) => {
                signature.push('I');
                JValueOwned::Int(n)
            }
        });
    }
    signature.push_str(")V");
    let values: Vec<JValue> = args.iter().map(JValueOwned::borrow).collect();
    Ok(env.new_object(class, signature, &values)?)
}

fn panic_message(p: Box<dyn Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// Runs an export's body: a panic or an error becomes one Java exception,
/// and the export returns `fallback` (which Java never sees, as it throws).
pub(crate) fn guarded<'l, T>(env: &mut JNIEnv<'l>, fallback: T, body: impl FnOnce(&mut JNIEnv<'l>) -> Outcome<T>) -> T {
    match catch_unwind(AssertUnwindSafe(|| body(env))) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            throw(env, f);
            fallback
        }
        Err(p) => {
            throw(env, Failure::Panic(panic_message(p)));
            fallback
        }
    }
}
