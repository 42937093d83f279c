//! `working-tree-encoding`: a UTF-8 blob re-encoded for the working tree exactly as git does it
//! on this platform, through the C library's `iconv` (glibc's on Linux), with git's rules
//! around it (`utf8.c`, `reencode_string_len`; `convert.c`, `encode_to_worktree`):
//!
//! * a label git counts as UTF-8 (`UTF-8`, `utf8`, …) converts nothing, nor does empty data;
//! * `UTF-16LE-BOM` and `UTF-16BE-BOM` are `UTF-16LE`/`UTF-16BE` behind a byte-order mark git
//!   writes itself; every other label goes to `iconv_open` as written (so `UTF-16` and `UTF-32`
//!   get glibc's byte-order mark and the machine's byte order), and when iconv does not know
//!   it, git's fallback spellings (`latin-1` → `ISO-8859-1`) are tried;
//! * the whole blob is converted in one call and, as git does, the converter is not flushed
//!   (a stateful encoding such as `ISO-2022-JP` ends without its final shift sequence);
//! * where iconv refuses (an encoding it does not know, a character the encoding cannot hold,
//!   bytes that are not UTF-8), git prints an error and writes the blob unconverted: so does
//!   treesync, and it says so ([`Encoded::Refused`]).

use std::ffi::CString;

/// What [`encode`] made of a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoded {
    /// Nothing to convert (empty data, or the label means UTF-8): written as it is.
    Same,
    /// The bytes to write.
    Converted(Vec<u8>),
    /// git refuses this conversion and writes the blob unconverted, after an error: why.
    Refused(Refusal),
}

/// Why git (and so treesync) writes a `working-tree-encoding` file unconverted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
    /// iconv does not know the encoding.
    UnknownEncoding,
    /// The content holds a character the encoding cannot hold, or is not valid UTF-8.
    Unconvertible,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::UnknownEncoding => {
                "the C library's iconv does not know this encoding (`iconv -l` lists those it knows)"
            }
            Refusal::Unconvertible => {
                "the content holds a character the encoding cannot hold, or bytes that are not UTF-8"
            }
        })
    }
}

/// git's `same_utf_encoding`: both names start with `utf` (any case), and what follows, with
/// one leading `-` dropped from each, is equal in any case (`UTF-16LE-BOM` = `utf16le-bom`).
fn same_utf(a: &str, b: &str) -> bool {
    let rest = |s: &str| {
        let (head, tail) = s.split_at_checked(3)?;
        head.eq_ignore_ascii_case("utf").then(|| tail.strip_prefix('-').unwrap_or(tail).to_string())
    };
    match (rest(a), rest(b)) {
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(&b),
        _ => false,
    }
}

/// Whether the `working-tree-encoding` value `label` converts anything (git's
/// `git_path_check_encoding`: an empty value or one naming UTF-8 does not).
pub fn converts(label: &str) -> bool {
    !(label.is_empty() || same_utf(label, "UTF-8"))
}

/// git's `fallback_encoding`: the official spelling of a name the platform may not know.
fn fallback(name: &str) -> &str {
    if same_utf(name, "utf-8") {
        "UTF-8"
    } else if name.eq_ignore_ascii_case("latin-1") {
        "ISO-8859-1"
    } else {
        name
    }
}

/// UTF-8 `data` as git writes it for `working-tree-encoding=label` on checkout.
pub fn encode(data: &[u8], label: &str) -> Encoded {
    if data.is_empty() || !converts(label) {
        return Encoded::Same;
    }
    let (to, bom): (&str, &[u8]) = if same_utf("UTF-16LE-BOM", label) {
        ("UTF-16LE", &[0xFF, 0xFE])
    } else if same_utf("UTF-16BE-BOM", label) {
        ("UTF-16BE", &[0xFE, 0xFF])
    } else {
        (label, &[])
    };
    let Some(converter) = Iconv::open(to, "UTF-8").or_else(|| Iconv::open(fallback(to), "UTF-8")) else {
        return Encoded::Refused(Refusal::UnknownEncoding);
    };
    match converter.convert(data) {
        Some(out) => {
            let mut all = Vec::with_capacity(bom.len() + out.len());
            all.extend_from_slice(bom);
            all.extend_from_slice(&out);
            Encoded::Converted(all)
        }
        None => Encoded::Refused(Refusal::Unconvertible),
    }
}

/// One `iconv_t` conversion descriptor, closed on drop.
struct Iconv(libc::iconv_t);

impl Iconv {
    fn open(to: &str, from: &str) -> Option<Iconv> {
        let (to, from) = (CString::new(to).ok()?, CString::new(from).ok()?);
        // SAFETY: both arguments are NUL-terminated strings that outlive the call.
        #[allow(unsafe_code)]
        let cd = unsafe { libc::iconv_open(to.as_ptr(), from.as_ptr()) };
        (cd as isize != -1).then_some(Iconv(cd))
    }

    /// All of `input` converted, as git's `reencode_string_iconv` does it: the output grows
    /// when iconv runs out of room; any other failure (`EILSEQ`, `EINVAL`) fails the whole
    /// conversion; the converter is not flushed afterwards.
    fn convert(&self, input: &[u8]) -> Option<Vec<u8>> {
        let mut out: Vec<u8> = vec![0; input.len().max(16)];
        let mut in_ptr = input.as_ptr().cast_mut().cast::<libc::c_char>();
        let mut in_left = input.len();
        let mut done = 0usize;
        loop {
            let mut out_ptr = out[done..].as_mut_ptr().cast::<libc::c_char>();
            let mut out_left = out.len() - done;
            let before = out_left;
            // SAFETY: the pointers and lengths describe `input` (read only) and the unused
            // tail of `out`, both alive for the call; iconv advances them within those bounds.
            #[allow(unsafe_code)]
            let n = unsafe { libc::iconv(self.0, &mut in_ptr, &mut in_left, &mut out_ptr, &mut out_left) };
            done += before - out_left;
            if n != usize::MAX {
                out.truncate(done);
                return Some(out);
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::E2BIG) {
                return None;
            }
            let grow = in_left.saturating_mul(2).max(16);
            out.resize(out.len() + grow, 0);
        }
    }
}

impl Drop for Iconv {
    fn drop(&mut self) {
        // SAFETY: the descriptor came from `iconv_open` and is closed once.
        #[allow(unsafe_code)]
        unsafe {
            libc::iconv_close(self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_git_counts_as_utf8_convert_nothing() {
        for label in ["UTF-8", "utf8", "Utf-8", ""] {
            assert_eq!(encode(b"abc", label), Encoded::Same, "{label}");
        }
        assert_eq!(encode(b"", "UTF-16"), Encoded::Same);
    }

    #[test]
    fn boms_git_writes_itself() {
        assert_eq!(encode(b"a", "UTF-16LE-BOM"), Encoded::Converted(vec![0xFF, 0xFE, b'a', 0]));
        assert_eq!(encode(b"a", "utf16be-bom"), Encoded::Converted(vec![0xFE, 0xFF, 0, b'a']));
    }

    #[test]
    fn refusals() {
        assert_eq!(encode(b"a", "NO-SUCH-ENCODING-X"), Encoded::Refused(Refusal::UnknownEncoding));
        assert_eq!(encode("\u{20ac}".as_bytes(), "ISO-8859-1"), Encoded::Refused(Refusal::Unconvertible));
        assert_eq!(encode(b"\xff", "UTF-16"), Encoded::Refused(Refusal::Unconvertible));
    }

    #[test]
    fn output_larger_than_twice_the_input_grows() {
        let text = "x".repeat(1000);
        let Encoded::Converted(out) = encode(text.as_bytes(), "UTF-32LE") else { panic!("converts") };
        assert_eq!(out.len(), 4000);
    }
}
