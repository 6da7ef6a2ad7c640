//! Strings from outside (the ledger, job files, other programs) rendered inert, once, where they
//! enter a view: C0/C1 controls, DEL, ESC sequences, bidi overrides and `\r` become visible
//! placeholders so they cannot move the cursor, recolour the terminal or reorder text.

/// Makes `s` safe to print on a terminal. Escape sequences are dropped whole; other controls
/// become `?`; bidi controls become `?`; newlines and tabs become spaces.
pub fn inert(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            // CSI as a single C1 code: skip parameters up to the final byte.
            '\u{9b}' => skip_csi(&mut chars),
            // OSC, DCS, SOS, PM, APC as C1 codes: skip up to ST or BEL.
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            '\n' | '\t' => out.push(' '),
            c if is_control(c) || is_bidi(c) => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// Inert and cut to at most `max` characters, marking the cut with `…`.
pub fn inert_trunc(s: &str, max: usize) -> String {
    let clean = inert(s);
    if clean.chars().count() <= max {
        return clean;
    }
    let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn is_control(c: char) -> bool {
    let u = c as u32;
    u < 0x20 || u == 0x7f || (0x80..=0x9f).contains(&u)
}

/// JSON text with every C1 control and bidi control written as a `\u` escape: the same string
/// to a JSON parser, but a terminal or a log viewer that shows the raw text cannot be reordered
/// or driven by it (serde_json writes them raw). They can only occur inside JSON strings, where
/// the escape means the same character.
pub fn json_visible(json: String) -> String {
    if !json
        .chars()
        .any(|c| (0x80..=0x9f).contains(&(c as u32)) || is_bidi(c))
    {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if (0x80..=0x9f).contains(&(c as u32)) || is_bidi(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `c` is a bidirectional-text control (embedding, override, isolate or mark), which
/// could make a terminal show text in another order than it is.
pub fn is_bidi(c: char) -> bool {
    matches!(c as u32, 0x202a..=0x202e | 0x2066..=0x2069 | 0x200e | 0x200f | 0x061c)
}

fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.peek() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']') | Some('P') | Some('X') | Some('^') | Some('_') => {
            chars.next();
            skip_string(chars);
        }
        Some(_) => {
            chars.next();
        }
        None => {}
    }
}

fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) {
            break;
        }
    }
}

fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        if c == '\u{7}' || c == '\u{9c}' {
            break;
        }
        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
            chars.next();
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_escapes_and_controls() {
        let hostile = "ok\u{1b}[31mred\u{1b}]0;title\u{7}\r\u{202e}evil\u{9b}2J\u{0}";
        let s = inert(hostile);
        assert_eq!(s, "okred??evil?");
        assert!(s.chars().all(|c| !is_control(c) && !is_bidi(c)));
    }

    #[test]
    fn truncates() {
        assert_eq!(inert_trunc("abcdef", 4), "abc…");
        assert_eq!(inert_trunc("abc", 4), "abc");
    }
}

#[cfg(test)]
mod json_tests {
    #[test]
    fn bidi_and_c1_controls_are_escaped_and_mean_the_same() {
        let v = serde_json::json!({"job": "pay\u{202e}lanif\u{85}x", "ok": "ünï"});
        let text = super::json_visible(serde_json::to_string(&v).expect("json"));
        assert!(
            text.contains("\\u202e") && text.contains("\\u0085"),
            "{text}"
        );
        assert!(
            !text.chars().any(|c| c == '\u{202e}' || c == '\u{85}'),
            "{text}"
        );
        assert!(text.contains("ünï"));
        let back: serde_json::Value = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, v);
    }
}
