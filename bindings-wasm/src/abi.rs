//! The exported functions (see the crate docs, "The ABI").

use std::cell::RefCell;

use crate::driver::Driver;
use crate::wire;

thread_local! {
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static TABLES: RefCell<Vec<Option<Driver>>> = const { RefCell::new(Vec::new()) };
}

/// Room for a request of `len` bytes; returns where JS writes it.
#[no_mangle]
pub extern "C" fn input(len: usize) -> usize {
    INPUT.with_borrow_mut(|b| {
        b.clear();
        b.resize(len, 0);
        b.as_ptr() as usize
    })
}

/// Where the last answer is (its length was returned by the call).
#[no_mangle]
pub extern "C" fn output() -> usize {
    OUTPUT.with_borrow(|b| b.as_ptr() as usize)
}

/// The length of the last answer (for `table_new`, which returns a handle).
#[no_mangle]
pub extern "C" fn output_len() -> usize {
    OUTPUT.with_borrow(Vec::len)
}

fn take_input(len: usize) -> String {
    INPUT.with_borrow(|b| String::from_utf8_lossy(&b[..len.min(b.len())]).into_owned())
}

fn set_output(s: String) -> usize {
    OUTPUT.with_borrow_mut(|b| {
        *b = s.into_bytes();
        b.len()
    })
}

/// A table from the config in the input. Returns its handle (from 1), with
/// where to connect in the output; or 0, with the error in the output.
#[no_mangle]
pub extern "C" fn table_new(len: usize) -> u32 {
    match Driver::from_config(&take_input(len)) {
        Ok((d, endpoint)) => TABLES.with_borrow_mut(|t| {
            let slot = t.iter().position(Option::is_none).unwrap_or_else(|| {
                t.push(None);
                t.len() - 1
            });
            t[slot] = Some(d);
            set_output(endpoint.to_string());
            slot as u32 + 1
        }),
        Err(payload) => {
            set_output(payload);
            0
        }
    }
}

/// One call on the table `handle`, the request in the input; returns the
/// answer's length (the answer is at [`output`]).
#[no_mangle]
pub extern "C" fn table_call(handle: u32, len: usize) -> usize {
    let request = take_input(len);
    let answer = TABLES.with_borrow_mut(|t| match t.get_mut((handle as usize).wrapping_sub(1)) {
        Some(Some(d)) => d.call(&request),
        _ => wire::no_table(),
    });
    set_output(answer)
}

/// Drops a table (after `close` and its cleanup).
#[no_mangle]
pub extern "C" fn table_free(handle: u32) {
    TABLES.with_borrow_mut(|t| {
        if let Some(slot) = t.get_mut((handle as usize).wrapping_sub(1)) {
            *slot = None;
        }
    });
}

/// A fresh owner id (the core's allocator, unique in this module instance).
/// A double: JS numbers are exact below 2^53.
#[no_mangle]
pub extern "C" fn next_owner_id() -> f64 {
    polylock_core::OwnerId::fresh().0 as f64
}
