//! `-regex` and `-iregex`: GNU find's regular expressions, translated to
//! the `regex` crate's syntax.
//!
//! find matches the whole path as printed (anchored at both ends) in one
//! of the syntaxes `-regextype` names: Emacs's by default (`\(` `\)` `\|`
//! group and alternate, `+ ?` repeat, `( ) | { }` are literal), POSIX
//! basic (`\( \) \{ \}` and GNU's `\| \+ \?`; `+ ? | ( ) { }` literal), or
//! POSIX extended (`( ) | + ? { }` operators, as in the regex crate). In
//! every syntax a `[...]` bracket expression takes its characters
//! literally (a backslash is itself) and knows `[:class:]`; `*` first in
//! an expression or group is literal, and in the basic and Emacs syntaxes
//! so are `^` and `$` away from the ends.
//!
//! Refused with a message (never guessed): back-references (`\1`), which
//! the regex crate does not have; collating elements (`[.x.]`, `[=x=]`);
//! intervals in the Emacs syntax; unknown `-regextype`s.
//!
//! Paths that are not UTF-8 (names with arbitrary bytes) are matched byte
//! by byte, as GNU find does in the C locale: `.` and `[^...]` match any
//! byte, classes and case folding are ASCII's. UTF-8 paths are matched
//! character by character, as in a UTF-8 locale. (A pattern that is not
//! ASCII itself matches only UTF-8 paths: its characters have no single
//! byte.)
//!
//! A compiled expression compares by its source, so that expression trees
//! holding it stay comparable.

use regex::bytes::Regex;
use std::fmt;

/// A `-regextype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Emacs,
    Basic,
    Extended,
}

impl Syntax {
    /// The syntax `-regextype NAME` selects.
    pub fn named(name: &str) -> Result<Syntax, String> {
        Ok(match name {
            "findutils-default" | "emacs" => Syntax::Emacs,
            "posix-basic" | "grep" | "ed" | "sed" => Syntax::Basic,
            "posix-extended" | "egrep" | "posix-egrep" | "awk" | "posix-awk" | "gnu-awk" => {
                Syntax::Extended
            }
            _ => {
                return Err(format!(
                    "unknown regular expression type '{name}'; Sextant knows \
                     findutils-default, emacs, posix-basic, grep, ed, sed, \
                     posix-extended, egrep, posix-egrep, awk, posix-awk, gnu-awk"
                ))
            }
        })
    }
}

/// A translated, compiled `-regex`/`-iregex`.
#[derive(Clone)]
pub struct PathRegex {
    /// As typed, with its syntax and case flag (what equality compares).
    source: (String, Syntax, bool),
    re: Regex,
    /// The same expression over bytes, for paths that are not UTF-8
    /// (`None` for a pattern that is not ASCII; see the module docs).
    bytes: Option<Regex>,
    /// Text every matching path's last component ends with, if the
    /// expression requires one ([`name_suffix`]).
    suffix: Option<String>,
}

impl PathRegex {
    pub fn new(pattern: &str, syntax: Syntax, ci: bool) -> Result<PathRegex, String> {
        let body = translate(pattern, syntax)?;
        let full = format!("(?s{})^(?:{body})$", if ci { "i" } else { "" });
        let re = Regex::new(&full)
            .map_err(|e| format!("invalid regular expression '{pattern}': {e}"))?;
        let bytes = pattern
            .is_ascii()
            .then(|| format!("(?s{}-u)^(?:{body})$", if ci { "i" } else { "" }))
            .and_then(|full| Regex::new(&full).ok());
        Ok(PathRegex {
            source: (pattern.to_string(), syntax, ci),
            re,
            bytes,
            // Case-blind matching folds more than ASCII (the Kelvin sign
            // matches k): no suffix is promised then.
            suffix: if ci {
                None
            } else {
                name_suffix(pattern, syntax)
            },
        })
    }

    /// Does the whole path match?
    pub fn matches(&self, path: &[u8]) -> bool {
        if std::str::from_utf8(path).is_ok() {
            self.re.is_match(path)
        } else {
            self.bytes.as_ref().is_some_and(|b| b.is_match(path))
        }
    }

    /// Text the name (last path component) of every match ends with, so
    /// that the server can narrow by name (`-name '*SUFFIX'`).
    pub fn name_suffix(&self) -> Option<&str> {
        self.suffix.as_deref()
    }
}

/// The literal text a whole-path match of `pat` must end with, cut after
/// its last `/` (so it is a suffix of the last component): the trailing
/// run of literal characters, before any final `$`. `None` when there is
/// none, or when the expression has an alternation anywhere (a branch
/// may end otherwise).
pub fn name_suffix(pat: &str, syntax: Syntax) -> Option<String> {
    enum Tok {
        Lit(char),
        Other,
    }
    let chars: Vec<char> = pat.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        let tok = match c {
            '\\' => {
                let &e = chars.get(i)?;
                i += 1;
                let operator = match syntax {
                    Syntax::Extended => false,
                    Syntax::Basic => matches!(e, '(' | ')' | '{' | '}' | '|' | '+' | '?'),
                    Syntax::Emacs => matches!(e, '(' | ')' | '{' | '}' | '|'),
                };
                if e == '|' && syntax != Syntax::Extended {
                    return None;
                }
                if operator || e.is_ascii_alphanumeric() || matches!(e, '<' | '>' | '`' | '\'') {
                    Tok::Other
                } else {
                    Tok::Lit(e)
                }
            }
            '|' if syntax == Syntax::Extended => return None,
            '[' => {
                // One token, whatever it holds.
                i = bracket(&chars, i, &mut String::new()).ok()?;
                Tok::Other
            }
            '.' | '*' | '^' | '$' => Tok::Other,
            '+' | '?' if syntax != Syntax::Basic => Tok::Other,
            '(' | ')' | '{' | '}' if syntax == Syntax::Extended => Tok::Other,
            other => Tok::Lit(other),
        };
        toks.push(tok);
    }
    // A final `$` anchors what is anchored anyway.
    if pat.ends_with('$') && !pat.ends_with("\\$") {
        toks.pop();
    }
    let mut suffix: Vec<char> = toks
        .iter()
        .rev()
        .map_while(|t| match t {
            Tok::Lit(c) => Some(*c),
            Tok::Other => None,
        })
        .collect();
    suffix.reverse();
    let text: String = suffix.into_iter().collect();
    let name_part = text.rsplit('/').next().unwrap_or("");
    (!name_part.is_empty()).then(|| name_part.to_string())
}

impl PartialEq for PathRegex {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for PathRegex {}

impl fmt::Debug for PathRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PathRegex({:?})", self.source)
    }
}

/// Emits `c` as a literal of the regex crate's syntax.
fn literal(out: &mut String, c: char) {
    out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
}

/// Translates `pat` (in `syntax`) into the regex crate's syntax, without
/// the anchors.
pub fn translate(pat: &str, syntax: Syntax) -> Result<String, String> {
    let chars: Vec<char> = pat.chars().collect();
    let mut out = String::with_capacity(pat.len() * 2);
    // At the start of an expression or a group, or after an alternation:
    // where `*` (and in BRE/Emacs `^`) has its special context.
    let mut at_start = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        let was_start = at_start;
        at_start = false;
        match c {
            '[' => i = bracket(&chars, i, &mut out)?,
            '.' => out.push('.'),
            '*' if was_start => literal(&mut out, '*'),
            '*' => out.push('*'),
            '^' if was_start || syntax == Syntax::Extended => {
                out.push('^');
                at_start = true;
            }
            '$' if syntax == Syntax::Extended || ends_here(&chars, i) => out.push('$'),
            '+' | '?' if syntax != Syntax::Basic && !was_start => out.push(c),
            '(' if syntax == Syntax::Extended => {
                out.push('(');
                at_start = true;
            }
            ')' | '{' | '}' if syntax == Syntax::Extended => out.push(c),
            '|' if syntax == Syntax::Extended => {
                out.push('|');
                at_start = true;
            }
            '\\' => {
                let Some(&e) = chars.get(i) else {
                    return Err(format!(
                        "invalid regular expression '{pat}': trailing backslash"
                    ));
                };
                i += 1;
                match (e, syntax) {
                    ('(', Syntax::Basic | Syntax::Emacs) => {
                        out.push('(');
                        at_start = true;
                    }
                    (')', Syntax::Basic | Syntax::Emacs) => out.push(')'),
                    ('|', Syntax::Basic | Syntax::Emacs) => {
                        out.push('|');
                        at_start = true;
                    }
                    ('{' | '}', Syntax::Basic) => out.push(e),
                    ('{' | '}', Syntax::Emacs) => {
                        return Err(format!(
                            "invalid regular expression '{pat}': intervals \\{{...\\}} are not \
                             supported in the emacs syntax; use -regextype posix-extended"
                        ))
                    }
                    ('+' | '?', Syntax::Basic) => out.push(e),
                    ('1'..='9', _) => {
                        return Err(format!(
                            "invalid regular expression '{pat}': back-references (\\{e}) are \
                             not supported"
                        ))
                    }
                    ('w' | 'W' | 's' | 'S' | 'b' | 'B' | '<' | '>', _) => {
                        out.push('\\');
                        out.push(e);
                    }
                    ('`', _) => out.push_str(r"\A"),
                    ('\'', _) => out.push_str(r"\z"),
                    (other, _) => literal(&mut out, other),
                }
            }
            other => literal(&mut out, other),
        }
    }
    Ok(out)
}

/// In BRE and Emacs syntax `$` is an anchor only at the end of the
/// expression or before `\)` or `\|`.
fn ends_here(chars: &[char], i: usize) -> bool {
    match chars.get(i) {
        None => true,
        Some('\\') => matches!(chars.get(i + 1), Some(')' | '|')),
        _ => false,
    }
}

/// Translates the bracket expression whose `[` is just before `i`;
/// returns the index after its `]`.
fn bracket(chars: &[char], mut i: usize, out: &mut String) -> Result<usize, String> {
    let bad = |why: &str| {
        let pat: String = chars.iter().collect();
        Err(format!("invalid regular expression '{pat}': {why}"))
    };
    out.push('[');
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let Some(&c) = chars.get(i) else {
            return bad("unmatched [");
        };
        if c == ']' && !first {
            out.push(']');
            return Ok(i + 1);
        }
        first = false;
        if c == '[' {
            match chars.get(i + 1) {
                Some(':') => {
                    let rest: String = chars[i + 2..].iter().collect();
                    let Some(end) = rest.find(":]") else {
                        return bad("unterminated character class");
                    };
                    let name = &rest[..end];
                    const CLASSES: [&str; 12] = [
                        "alnum", "alpha", "blank", "cntrl", "digit", "graph", "lower", "print",
                        "punct", "space", "upper", "xdigit",
                    ];
                    if !CLASSES.contains(&name) {
                        return bad(&format!("unknown character class '{name}'"));
                    }
                    out.push_str(&format!("[:{name}:]"));
                    i += 2 + name.chars().count() + 2;
                    continue;
                }
                Some('.' | '=') => return bad("collating elements are not supported"),
                _ => {}
            }
        }
        // A range `a-z` (a `-` first or last is literal).
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&e| e != ']') {
            let end = chars[i + 2];
            if end < c {
                return bad("invalid range end");
            }
            out.push_str(&format!("\\x{{{:X}}}-\\x{{{:X}}}", c as u32, end as u32));
            i += 3;
            continue;
        }
        out.push_str(&format!("\\x{{{:X}}}", c as u32));
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pat: &str, syntax: Syntax, path: &str) -> bool {
        PathRegex::new(pat, syntax, false)
            .unwrap_or_else(|e| panic!("{e}"))
            .matches(path.as_bytes())
    }

    #[test]
    fn emacs_syntax() {
        let e = Syntax::Emacs;
        assert!(m(r".*\.\(c\|h\)", e, "./src/a.c"));
        assert!(m(r".*\.\(c\|h\)", e, "./src/a.h"));
        assert!(!m(r".*\.\(c\|h\)", e, "./src/a.o"));
        assert!(!m(r".*\.c", e, "./a.cc"), "anchored at the end");
        assert!(!m(r"a", e, "./a"), "anchored at the start");
        assert!(m(r".*(x)", e, "./(x)"), "( ) are literal");
        assert!(m(r".*a+", e, "./aaa"));
        assert!(m(r".*x|y", e, "./x|y"), "| is literal");
        assert!(m(r"*a", e, "*a"), "a leading * is literal");
        assert!(m(r".*a$b", e, ".a$b"), "$ inside is literal");
        assert!(m(r".*[\]", e, "./\\"), "a backslash in brackets is itself");
        assert!(m("./[[:digit:]]+", e, "./123"));
        assert!(m("./[]a]*", e, "./]a]"), "] first in brackets is literal");
        assert!(m("./[^a-c]", e, "./d"));
        assert!(!m("./[^a-c]", e, "./b"));
        assert!(m(".*", e, "./new\nline"), ". matches a newline");
        assert!(translate(r"a\{2\}", e).is_err());
    }

    #[test]
    fn paths_that_are_not_utf8_match_byte_by_byte() {
        let bytes = |pat: &str, syntax: Syntax, ci: bool, path: &[u8]| {
            PathRegex::new(pat, syntax, ci).unwrap().matches(path)
        };
        let (e, x) = (Syntax::Emacs, Syntax::Extended);
        assert!(bytes(".*", e, false, b"./a\xffb"));
        assert!(bytes(".*a.b", e, false, b"./a\xffb"), ". is one byte");
        assert!(!bytes(".*a..b", e, false, b"./a\xffb"));
        assert!(bytes("./[^a-z]b", x, false, b"./\xffb"));
        assert!(
            bytes(".*X.Y\\.C", e, true, b"./x\xe9y.c"),
            "ASCII case folding"
        );
        assert!(!bytes(".*[[:alpha:]]b", e, false, b"./\xffb"));
        // UTF-8 paths still match character by character.
        assert!(bytes(".*caf.", e, false, "./café".as_bytes()));
        assert!(!bytes(".*caf..", e, false, "./café".as_bytes()));
        // A pattern that is not ASCII matches UTF-8 paths only.
        assert!(bytes(".*é", e, false, "./café".as_bytes()));
        assert!(!bytes(".*é", e, false, b"./\xffcaf\xc3\xa9"));
    }

    #[test]
    fn basic_and_extended_syntax() {
        let (b, x) = (Syntax::Basic, Syntax::Extended);
        assert!(m(r".*\(ab\)\{2\}", b, "./abab"));
        assert!(m(r".*a+", b, "./a+"), "+ is literal in BRE");
        assert!(m(r".*a\+", b, "./aa"), "\\+ is GNU's BRE extension");
        assert!(m(r".*\.(c|h)", x, "./a.h"));
        assert!(m(r".*(ab){2}", x, "./abab"));
        assert!(!m(r".*(ab){2}", x, "./ab"));
        assert!(
            m(r".*\(x\)", x, "./(x)"),
            "escaped parens are literal in ERE"
        );
        assert!(m(r"^\./a$", x, "./a"));
    }

    #[test]
    fn required_name_suffixes() {
        let suf = |p: &str, x: Syntax| name_suffix(p, x);
        assert_eq!(suf(r".*\.c", Syntax::Emacs).as_deref(), Some(".c"));
        assert_eq!(
            suf(r".*/Makefile", Syntax::Basic).as_deref(),
            Some("Makefile")
        );
        assert_eq!(suf(r".*\.txt$", Syntax::Extended).as_deref(), Some(".txt"));
        assert_eq!(suf(r"./a/b/c\.h", Syntax::Emacs).as_deref(), Some("c.h"));
        assert_eq!(suf(r".*ab*", Syntax::Emacs), None, "b is repeated");
        assert_eq!(suf(r".*abc?", Syntax::Extended), None);
        assert_eq!(
            suf(r".*ab+", Syntax::Basic).as_deref(),
            Some("ab+"),
            "+ is literal in BRE"
        );
        assert_eq!(suf(r".*\.\(c\|h\)", Syntax::Emacs), None, "alternation");
        assert_eq!(suf(r".*(c|h)", Syntax::Extended), None);
        assert_eq!(suf(r".*(c)", Syntax::Emacs).as_deref(), Some("(c)"));
        assert_eq!(suf(r".*[ch]", Syntax::Emacs), None);
        assert_eq!(suf(r".*/", Syntax::Emacs), None);
        assert_eq!(suf(r".*\w", Syntax::Extended), None);
        assert!(PathRegex::new(r".*\.c", Syntax::Emacs, true)
            .unwrap()
            .name_suffix()
            .is_none());
    }

    #[test]
    fn case_and_refusals() {
        let r = PathRegex::new(r".*\.C", Syntax::Emacs, true).unwrap();
        assert!(r.matches(b"./x.c"));
        for (pat, syntax, why) in [
            (r"\(a\)\1", Syntax::Emacs, "back-references"),
            ("[[.a.]]", Syntax::Emacs, "collating"),
            ("[[:foo:]]", Syntax::Extended, "unknown character class"),
            ("[abc", Syntax::Emacs, "unmatched ["),
            ("a\\", Syntax::Basic, "trailing backslash"),
            ("[z-a]", Syntax::Basic, "invalid range"),
            ("(a", Syntax::Extended, "invalid regular expression"),
        ] {
            let e = PathRegex::new(pat, syntax, false).unwrap_err();
            assert!(e.contains(why), "{pat}: {e}");
        }
        assert!(Syntax::named("posix-minimal-basic").is_err());
        assert_eq!(Syntax::named("egrep"), Ok(Syntax::Extended));
        assert_eq!(
            PathRegex::new("a", Syntax::Emacs, false),
            PathRegex::new("a", Syntax::Emacs, false)
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// The promised suffix never rules out a match: whenever a path
        /// matches, its last component ends with the suffix.
        #[test]
        fn the_name_suffix_holds_for_every_match(
            atoms in proptest::collection::vec(proptest::sample::select(vec![
                ".*", ".", "a", "b", "/", "[ab]", "[^a]", "[]a]", "\\.", "\\/", "a*", "b+",
                "a?", "(a|b)", "\\(a\\|b\\)", "\\(b\\)", "(b)", "a\\{2\\}", "b{2}",
                "$", "\\$", "+", "?", "|", "\\w",
            ]), 0..6),
            path in "[ab./$+?|()]{0,8}",
        ) {
            let pat: String = atoms.concat();
            for syntax in [Syntax::Emacs, Syntax::Basic, Syntax::Extended] {
                let Ok(r) = PathRegex::new(&pat, syntax, false) else { continue };
                let Some(suffix) = r.name_suffix() else { continue };
                if r.matches(path.as_bytes()) {
                    let name = path.rsplit('/').next().unwrap_or("");
                    proptest::prop_assert!(
                        name.ends_with(suffix),
                        "{:?} ({:?}) matched {:?}, whose name does not end with {:?}",
                        pat, syntax, path, suffix
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// Any pattern in any syntax is translated or refused, never a
        /// panic; a translated one matches literal text made of plain
        /// characters as itself.
        #[test]
        fn any_pattern_is_translated_or_refused(
            pat in "[-a-z.*+?^$|(){}\\\\\\[\\]:/ 0-9]{0,24}",
            plain in "[a-z0-9/ ]{0,12}",
            path in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..32),
        ) {
            for syntax in [Syntax::Emacs, Syntax::Basic, Syntax::Extended] {
                if let Ok(r) = PathRegex::new(&pat, syntax, false) {
                    let _ = r.matches(&path);
                }
                let r = PathRegex::new(&plain, syntax, false).unwrap();
                proptest::prop_assert!(r.matches(plain.as_bytes()));
            }
        }
    }
}
