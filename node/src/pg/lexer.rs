//! Just enough SQL lexing for the wire protocol: splitting a query string into statements, reading
//! a statement's leading keywords, and replacing `$n` placeholders with literals. All of it skips
//! string literals (`'...'`, `E'...'`, `$tag$...$tag$`), quoted identifiers and comments, so a `;`
//! or `$1` inside them is left alone.

/// What a span of SQL text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    /// Keywords, names, operators, numbers, whitespace.
    Code,
    /// A string literal or a quoted identifier.
    Quoted,
    /// A `--` or `/* */` comment.
    Comment,
}

/// Cuts `sql` into spans `(kind, start, end)` (byte offsets, always on character boundaries).
fn lex(sql: &str) -> Vec<(Span, usize, usize)> {
    let b = sql.as_bytes();
    let mut spans = Vec::new();
    let mut code_start = 0;
    let mut i = 0;
    while i < b.len() {
        let token = match b[i] {
            b'\'' => {
                // E'...' strings take backslash escapes.
                let escapes =
                    i > 0 && matches!(b[i - 1], b'e' | b'E') && (i < 2 || !is_ident_byte(b[i - 2]));
                Some((Span::Quoted, quoted_end(b, i, b'\'', escapes)))
            }
            b'"' => Some((Span::Quoted, quoted_end(b, i, b'"', false))),
            b'-' if b.get(i + 1) == Some(&b'-') => Some((
                Span::Comment,
                b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p + 1),
            )),
            b'/' if b.get(i + 1) == Some(&b'*') => Some((Span::Comment, block_comment_end(b, i))),
            b'$' if i == 0 || !is_ident_byte(b[i - 1]) => {
                dollar_tag_len(b, i).map(|len| (Span::Quoted, dollar_quote_end(b, i, len)))
            }
            _ => None,
        };
        match token {
            Some((kind, end)) => {
                if code_start < i {
                    spans.push((Span::Code, code_start, i));
                }
                spans.push((kind, i, end));
                i = end;
                code_start = end;
            }
            None => i += 1,
        }
    }
    if code_start < b.len() {
        spans.push((Span::Code, code_start, b.len()));
    }
    spans
}

/// Bytes that may continue an identifier (PostgreSQL allows `$` and any non-ASCII letter).
fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// End (exclusive) of the literal or identifier opened by the `quote` at `start`.
fn quoted_end(b: &[u8], start: usize, quote: u8, backslash_escapes: bool) -> usize {
    let mut j = start + 1;
    while j < b.len() {
        if backslash_escapes && b[j] == b'\\' {
            j += 2;
        } else if b[j] == quote {
            if b.get(j + 1) == Some(&quote) {
                j += 2;
            } else {
                return j + 1;
            }
        } else {
            j += 1;
        }
    }
    b.len()
}

/// End (exclusive) of the `/* */` comment at `start`; these nest in PostgreSQL.
fn block_comment_end(b: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut j = start;
    while j + 1 < b.len() {
        match (b[j], b[j + 1]) {
            (b'/', b'*') => {
                depth += 1;
                j += 2;
            }
            (b'*', b'/') => {
                depth = depth.saturating_sub(1);
                j += 2;
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    b.len()
}

/// Length of the dollar-quote tag (`$$` or `$name$`) at `start`, if there is one there.
fn dollar_tag_len(b: &[u8], start: usize) -> Option<usize> {
    let mut j = start + 1;
    if b.get(j).is_some_and(u8::is_ascii_digit) {
        return None; // a `$1` placeholder
    }
    while let Some(&c) = b.get(j) {
        if c == b'$' {
            return Some(j + 1 - start);
        }
        if !(c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80) {
            return None;
        }
        j += 1;
    }
    None
}

/// End (exclusive) of the dollar-quoted string whose `len`-byte tag starts at `start`.
fn dollar_quote_end(b: &[u8], start: usize, len: usize) -> usize {
    let tag = &b[start..start + len];
    let body = start + len;
    b[body..].windows(len).position(|w| w == tag).map_or(b.len(), |p| body + p + len)
}

/// The statements of a query string, trimmed and without their `;`. Pieces holding nothing but
/// whitespace and comments are dropped, so `"-- ping"` has no statements.
pub(super) fn split_statements(sql: &str) -> Vec<&str> {
    let mut statements = Vec::new();
    let mut start = 0;
    let mut has_code = false;
    for (kind, from, to) in lex(sql) {
        match kind {
            Span::Comment => {}
            Span::Quoted => has_code = true,
            Span::Code => {
                for (offset, c) in sql[from..to].char_indices() {
                    if c == ';' {
                        if has_code {
                            statements.push(sql[start..from + offset].trim());
                        }
                        start = from + offset + 1;
                        has_code = false;
                    } else if !c.is_whitespace() {
                        has_code = true;
                    }
                }
            }
        }
    }
    if has_code {
        statements.push(sql[start..].trim());
    }
    statements
}

/// The first `n` words of a statement, upper-cased, skipping comments and opening parentheses;
/// stops at the first string literal or quoted identifier.
pub(super) fn leading_words(sql: &str, n: usize) -> Vec<String> {
    let mut words = Vec::with_capacity(n);
    for (kind, from, to) in lex(sql) {
        match kind {
            Span::Comment => {}
            Span::Quoted => break,
            Span::Code => {
                let code = sql[from..to]
                    .split(|c: char| c.is_whitespace() || c == '(' || c == ';')
                    .filter(|w| !w.is_empty());
                for word in code {
                    if words.len() == n {
                        return words;
                    }
                    words.push(word.to_ascii_uppercase());
                }
            }
        }
    }
    words.truncate(n);
    words
}

/// The `$n` placeholders of `sql` outside literals and comments: `(start, end, n)`.
fn placeholders(sql: &str) -> Vec<(usize, usize, usize)> {
    let b = sql.as_bytes();
    let mut found = Vec::new();
    for (kind, from, to) in lex(sql) {
        if kind != Span::Code {
            continue;
        }
        let mut i = from;
        while i < to {
            if b[i] == b'$' && (i == 0 || !is_ident_byte(b[i - 1])) {
                let digits = b[i + 1..to].iter().take_while(|c| c.is_ascii_digit()).count();
                if digits > 0 {
                    // A number too large for usize is still a placeholder, beyond any limit.
                    let n = sql[i + 1..i + 1 + digits].parse::<usize>().unwrap_or(usize::MAX);
                    found.push((i, i + 1 + digits, n));
                    i += 1 + digits;
                    continue;
                }
            }
            i += 1;
        }
    }
    found
}

/// The highest placeholder number used in `sql` (0 if it has none).
pub(super) fn placeholder_count(sql: &str) -> usize {
    placeholders(sql).into_iter().map(|(_, _, n)| n).max().unwrap_or(0)
}

/// `sql` with each `$n` replaced by `values[n - 1]`. Fails with the number of the first
/// placeholder that has no value.
pub(super) fn substitute(sql: &str, values: &[String]) -> Result<String, usize> {
    let mut out = String::with_capacity(sql.len() + 8 * values.len());
    let mut copied = 0;
    for (start, end, n) in placeholders(sql) {
        let value = n.checked_sub(1).and_then(|i| values.get(i)).ok_or(n)?;
        out.push_str(&sql[copied..start]);
        out.push_str(value);
        copied = end;
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_outside_literals_and_comments() {
        let sql =
            "SELECT 1; SELECT ';' AS \"a;b\"; -- only a comment;\n ; /* x; */ SELECT $$a;b$$;";
        assert_eq!(
            split_statements(sql),
            vec!["SELECT 1", "SELECT ';' AS \"a;b\"", "/* x; */ SELECT $$a;b$$"]
        );
        assert!(split_statements("-- ping").is_empty());
        assert!(split_statements(" ; ;").is_empty());
        assert_eq!(split_statements("SELECT E'it\\'s;'"), vec!["SELECT E'it\\'s;'"]);
        assert_eq!(split_statements("SELECT 'it''s;'"), vec!["SELECT 'it''s;'"]);
    }

    #[test]
    fn reads_leading_words() {
        assert_eq!(leading_words("/* c */ -- d\n (select 1)", 1), vec!["SELECT"]);
        assert_eq!(leading_words("show transaction isolation level;", 5).len(), 4);
        assert_eq!(leading_words("SET x = 'a b'", 5), vec!["SET", "X", "="]);
    }

    #[test]
    fn substitutes_placeholders_in_code_only() {
        let sql = "SELECT $1, '$2', \"$3\", $2, a$1 -- $4";
        assert_eq!(placeholder_count(sql), 2);
        let out = substitute(sql, &["1".to_string(), "'x'".to_string()]).unwrap();
        assert_eq!(out, "SELECT 1, '$2', \"$3\", 'x', a$1 -- $4");
        assert_eq!(substitute("SELECT $3", &[]), Err(3));
        assert_eq!(substitute("SELECT $tag$ $1 $tag$", &[]).unwrap(), "SELECT $tag$ $1 $tag$");
    }
}
