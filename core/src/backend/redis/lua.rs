//! The Lua sources as they go on the wire: comments and indentation
//! dropped at compile time.
//!
//! Why: a script goes by its SHA1 (`EVALSHA`) while the server has it, and
//! with its source (`EVAL`) when it does not (see
//! [`crate::io::RedisOp::Eval`]); the source is what the server loads then,
//! what operators read in `SCRIPT` listings, and what drivers that always
//! send it (`bindings-wasm/workerd/`) send on every call, where the server
//! reads and hashes (SHA1) all of it before the script runs, outside what
//! `INFO commandstats` counts. The commented sources of an acquire and a
//! release are 6.4 KB; without comments and indentation 4.4 KB, which cut
//! the server's CPU per uncontended acquire+release by `EVAL` from about
//! 23 µs to 19.5 µs here (`used_cpu_sys + used_cpu_user` over 20,000
//! pipelined pairs), before the runtime sent them by SHA1.
//! The scripts in the source files keep their comments for the reader.
//!
//! The rules, line by line: leading and trailing blanks go; a `--` comment
//! outside a string literal goes to the end of its line; an empty line goes.
//! The first line is kept as written when it is a comment: it names the
//! script and its version (`-- polylock acquire v9`), which is what an
//! operator sees in `SLOWLOG`, `MONITOR` and `SCRIPT` listings. Long
//! brackets (`[[ ]]`, `--[[ ]]`) are refused at compile time: a line-wise
//! rule would cut them apart.

/// The source `src` minified, as a `&'static str`, computed at compile time.
macro_rules! lua {
    ($src:expr) => {{
        const SRC: &str = $src;
        const LEN: usize = $crate::backend::redis::lua::minified_len(SRC);
        const BYTES: [u8; LEN] = $crate::backend::redis::lua::minify::<LEN>(SRC);
        const OUT: &str = match core::str::from_utf8(&BYTES) {
            Ok(s) => s,
            Err(_) => panic!("lua!: minified source is not UTF-8"),
        };
        OUT
    }};
}
pub(crate) use lua;

/// The kept part `[from, to)` of the line that starts at `start`, and where
/// the next line starts.
const fn kept(s: &[u8], start: usize) -> (usize, usize, usize) {
    let mut end = start;
    while end < s.len() && s[end] != b'\n' {
        end += 1;
    }
    let next = if end < s.len() { end + 1 } else { end };
    let mut from = start;
    while from < end && is_blank(s[from]) {
        from += 1;
    }
    let tag = start == 0 && from + 1 < end && s[from] == b'-' && s[from + 1] == b'-';
    let mut to = end;
    let mut j = from;
    let mut quote = 0u8;
    while j < end {
        let c = s[j];
        if c == b'[' && j + 1 < end && s[j + 1] == b'[' {
            panic!("lua!: long brackets ([[ ]]) are not supported");
        }
        if quote != 0 {
            if c == b'\\' {
                j += 1;
            } else if c == quote {
                quote = 0;
            }
        } else if c == b'\'' || c == b'"' {
            quote = c;
        } else if !tag && c == b'-' && j + 1 < end && s[j + 1] == b'-' {
            to = j;
            break;
        }
        j += 1;
    }
    while to > from && is_blank(s[to - 1]) {
        to -= 1;
    }
    (from, to, next)
}

const fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t' || c == b'\r'
}

/// The length of `minify(src)`: each kept line and its newline.
pub(crate) const fn minified_len(src: &str) -> usize {
    let s = src.as_bytes();
    let (mut start, mut len) = (0, 0);
    while start < s.len() {
        let (from, to, next) = kept(s, start);
        if to > from {
            len += to - from + 1;
        }
        start = next;
    }
    len
}

/// `src` by the rules above; `N` must be `minified_len(src)`.
pub(crate) const fn minify<const N: usize>(src: &str) -> [u8; N] {
    let s = src.as_bytes();
    let mut out = [0u8; N];
    let (mut start, mut at) = (0, 0);
    while start < s.len() {
        let (from, to, next) = kept(s, start);
        if to > from {
            let mut k = from;
            while k < to {
                out[at] = s[k];
                at += 1;
                k += 1;
            }
            out[at] = b'\n';
            at += 1;
        }
        start = next;
    }
    assert!(at == N, "lua!: N is not minified_len(src)");
    out
}

#[cfg(test)]
mod tests {
    use crate::backend::redis::{rw_scripts, scripts, sem_scripts};
    use crate::io::Script;

    #[test]
    fn comments_indentation_and_empty_lines_go_the_tag_and_strings_stay() {
        const OUT: &str = lua!(concat!(
            "-- polylock example v1\n",
            "\n",
            "  -- a whole-line comment\n",
            "local a = 1 -- a trailing one\n",
            "    if a then\t\n",
            "  return 'a -- b' .. \"c -- d\" .. 'it\\'s -- e' -- gone\n",
            "end"
        ));
        assert_eq!(
            OUT,
            "-- polylock example v1\nlocal a = 1\nif a then\nreturn 'a -- b' .. \"c -- d\" .. 'it\\'s -- e'\nend\n"
        );
    }

    #[test]
    fn only_a_comment_on_the_first_line_is_kept() {
        const OUT: &str = lua!("return 1 -- no tag\n-- polylock not a tag\n");
        assert_eq!(OUT, "return 1\n");
    }

    fn all() -> [&'static Script; 10] {
        [
            &scripts::ACQUIRE,
            &scripts::LEAVE,
            &scripts::RENEW,
            &scripts::STATUS,
            &rw_scripts::RW_ACQUIRE,
            &rw_scripts::RW_LEAVE,
            &rw_scripts::RW_RENEW,
            &sem_scripts::SEM_ACQUIRE,
            &sem_scripts::SEM_LEAVE,
            &sem_scripts::SEM_RENEW,
        ]
    }

    /// Every script goes out minified and still says what it is.
    #[test]
    fn every_script_is_sent_minified_under_its_tag() {
        for s in all() {
            let mut lines = s.source.lines();
            let tag = lines.next().unwrap();
            assert!(tag.starts_with("-- polylock "), "{}: first line {tag:?}", s.name);
            for line in lines {
                assert!(!line.is_empty() && line.trim() == line, "{}: line {line:?}", s.name);
                assert!(!line.starts_with("--"), "{}: comment {line:?}", s.name);
            }
        }
    }

    /// The bytes of an uncontended acquire+release, the two sources every
    /// such pair carries (see the module docs): they were 6,430 commented.
    #[test]
    fn an_acquire_and_a_release_carry_under_4600_bytes_of_source() {
        let pair = scripts::ACQUIRE.source.len() + scripts::LEAVE.source.len();
        assert!(pair < 4_600, "acquire+release sources: {pair} bytes");
    }
}
