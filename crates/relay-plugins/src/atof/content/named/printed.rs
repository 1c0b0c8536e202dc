//! Credentials in outputs printed a line per record, where no name stands right before the
//! value: a PostgreSQL password file, the AWS CLI's `text` and `table` outputs, a table's
//! column named for a credential (psql, the MySQL client, Markdown), and a Kubernetes
//! secret's data under keys of any name.

use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

use super::{MAX_SPANNED_VALUE, floor_char_boundary, names_a_credential_in_text, names_a_setting};

/// Where the credentials of the printed records in `text` lie; see the module.
pub(super) fn printed_credentials(text: &str) -> Vec<Range<usize>> {
    let Some(p) = &*PATTERNS else {
        return Vec::new();
    };
    let mut hidden = Vec::new();
    // Cheap looks first: most texts hold none of these, and the patterns cost more.
    // `~/.pgpass`: `host:port:database:user:password`, the password to the line's end.
    if text.split('\n').any(starts_as_pgpass) {
        hidden.extend(p.pgpass.captures_iter(text).filter_map(|caps| {
            let (line, password) = (caps.get(0)?, caps.get(1)?);
            starts_as_pgpass(&text[line.start()..]).then(|| password.range())
        }));
    }
    if text.contains("String\t") {
        hidden.extend(aws_text_parameters(text, &p.aws_parameter));
    }
    // `aws sts assume-role` (and `get-session-token`) and `aws iam create-access-key`.
    if text.contains("CREDENTIALS\t") || text.contains("ACCESSKEY\t") {
        for caps in p.aws_keys.captures_iter(text) {
            hidden.extend(caps.iter().skip(1).flatten().map(|key| key.range()));
        }
    }
    if shows_a_secret(text) {
        hidden.extend(kubernetes_secret_data(text, &p.json_data, &p.json_value));
    }
    if text.contains("secretsmanager:") {
        hidden.extend(
            p.aws_secret
                .captures_iter(text)
                .filter_map(|caps| caps.get(1).map(|secret| secret.range())),
        );
    }
    // A rule under a header (`---+---`, `+----+`, `|---|`).
    if text.contains('|') && (text.contains("-+") || text.contains("+-") || text.contains("-|")) {
        hidden.extend(column_cells(text));
    }
    if text.contains("||") {
        hidden.extend(table_rows(text, &p.table_row));
    }
    hidden
}

/// Whether `text` shows a Kubernetes secret: `kind: Secret` ending its line, maybe with a
/// comment (not `SecretProviderClass`), or `"kind": "Secret"`.
fn shows_a_secret(text: &str) -> bool {
    text.match_indices("kind: Secret").any(|(at, found)| {
        // Then the line's end, maybe after blanks or a comment.
        let after = text[at + found.len()..].trim_start_matches([' ', '\t']);
        after.is_empty() || after.starts_with(['\n', '\r', '#'])
    }) || text.contains("\"kind\": \"Secret\"")
        || text.contains("\"kind\":\"Secret\"")
}

/// The values of a Kubernetes secret's `data` and `stringData` (`kubectl get secret -o yaml`
/// or `-o json`), whatever their keys are named: in a text that shows a secret, every
/// entry under `stringData`, and every base64 value under `data` (so a ConfigMap's plain
/// `data` printed beside it keeps its words).
fn kubernetes_secret_data(text: &str, json_data: &Regex, json_value: &Regex) -> Vec<Range<usize>> {
    let mut hidden = Vec::new();
    // YAML: the lines indented under `data:` or `stringData:` (the indentation of that key,
    // and whether only base64 is read); of an entry, what follows its key.
    let mut under: Option<(usize, bool)> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let content = line.trim_end_matches(['\r', '\n']);
        let body = content.trim_start_matches([' ', '\t']);
        if body.is_empty() {
            continue;
        }
        let indent = content.len() - body.len();
        if let Some((base, base64_only)) = under
            && indent > base
        {
            let value = match body.find(": ") {
                Some(colon) if !body[..colon].contains(' ') => colon + 2,
                _ if body.ends_with(':') => continue,
                _ => 0,
            };
            let value_text = body[value..].trim_end();
            if !value_text.is_empty()
                && !matches!(value_text, "|" | ">" | "|-" | ">-")
                && (!base64_only || is_base64(value_text.trim_matches(['"', '\''])))
            {
                let value_start = start + indent + value;
                hidden.push(value_start..value_start + value_text.len());
            }
            continue;
        }
        under = match body {
            "data:" => Some((indent, true)),
            "stringData:" => Some((indent, false)),
            _ => None,
        };
    }
    // JSON: the string values inside `"data": {…}` and `"stringData": {…}`; an opening
    // inside one already read is not read again, so the text is read once.
    let mut read_to = 0;
    for data in json_data.captures_iter(text) {
        let (Some(whole), Some(key)) = (data.get(0), data.get(1)) else {
            continue;
        };
        if whole.start() < read_to {
            continue;
        }
        // Bounded, so that a text of many openings is read in linear time.
        let inside = &text[whole.end()..floor_char_boundary(text, whole.end() + MAX_SPANNED_VALUE)];
        let inside = &inside[..inside.find('}').unwrap_or(inside.len())];
        read_to = whole.end() + inside.len();
        let base64_only = key.as_str() == "data";
        hidden.extend(json_value.captures_iter(inside).filter_map(|caps| {
            let value = caps.get(1)?;
            (!base64_only || is_base64(value.as_str().trim_matches('"')))
                .then(|| whole.end() + value.start()..whole.end() + value.end())
        }));
    }
    hidden
}

/// Whether `value` is base64 as a secret's `data` holds it: whole groups of four of its
/// characters, padding only at the end, and at least two groups (so a ConfigMap's `mode:
/// prod` or `enabled: true` printed beside it is not read as one).
fn is_base64(value: &str) -> bool {
    let digits = value.trim_end_matches('=');
    value.len() >= 8
        && value.len().is_multiple_of(4)
        && value.len() - digits.len() <= 2
        && digits
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// The cells under a column named for a credential in a table drawn with `|` (psql's aligned
/// output, the MySQL client's boxes, a Markdown table): a header row with such a name among
/// its cells, a rule right under it, and the rows after it with as many cells; a rule between
/// rows (a box's bottom) is passed over, and any other line ends the table. Also psql's
/// expanded records (`-x`), a `name | value` line each under `-[ RECORD 1 ]`.
fn column_cells(text: &str) -> Vec<Range<usize>> {
    let mut hidden = Vec::new();
    let expanded = text.contains("-[ RECORD ");
    // The header's cell count and its credentials' columns, waiting for the rule under it;
    // then the table's.
    let mut header: Option<Columns> = None;
    let mut table: Option<Columns> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let line = line.trim_end_matches(['\r', '\n']);
        if is_rule(line) {
            table = table.or(header.take());
            continue;
        }
        let cells = cells(line);
        if let Some((count, columns)) = &table {
            if cells.len() == *count {
                hidden.extend(
                    columns
                        .iter()
                        .map(|&c| start + cells[c].start..start + cells[c].end),
                );
                continue;
            }
            table = None;
        }
        let credentials: Vec<usize> = (0..cells.len())
            .filter(|&c| names_a_column_of_secrets(&line[cells[c].clone()]))
            .collect();
        if expanded && cells.len() == 2 && credentials == [0] {
            hidden.push(start + cells[1].start..start + cells[1].end);
        }
        header = (cells.len() > 1 && !credentials.is_empty()).then_some((cells.len(), credentials));
    }
    hidden.retain(|cell| !cell.is_empty());
    hidden
}

/// A table's cell count, and the columns named for a credential.
type Columns = (usize, Vec<usize>);

/// Whether a table's column named `name` holds credentials: a name of one, but not the
/// words a column of something else is often named (`Pass` counting tests, `Auth` saying
/// whether it is required, `Secret` listing secrets' names, `Token` in a lexer's docs).
fn names_a_column_of_secrets(name: &str) -> bool {
    const OTHER_COLUMNS: [&str; 9] = [
        "pass",
        "auth",
        "secret",
        "secrets",
        "token",
        "tokens",
        "key",
        "credential",
        "credentials",
    ];
    names_a_credential_in_text(name)
        && !OTHER_COLUMNS
            .iter()
            .any(|other| name.eq_ignore_ascii_case(other))
}

/// Whether `line` is a table's rule: dashes, with `+`, `|`, `:` or blanks between.
fn is_rule(line: &str) -> bool {
    line.contains('-')
        && line
            .bytes()
            .all(|b| matches!(b, b'-' | b'+' | b'|' | b':' | b'=' | b' '))
}

/// Where the cells of a table's row lie in `line`, each without its blanks: between `|`s,
/// less the empty ones a box's or a Markdown table's outer `|`s leave.
fn cells(line: &str) -> Vec<Range<usize>> {
    if !line.contains('|') {
        return Vec::new();
    }
    let mut cells = Vec::new();
    let mut from = 0;
    for piece in line.split('|') {
        let trimmed = piece.trim();
        let lead = piece.len() - piece.trim_start().len();
        cells.push(from + lead..from + lead + trimmed.len());
        from += piece.len() + 1;
    }
    let outer = line.trim_start().starts_with('|') && line.trim_end().ends_with('|');
    if outer && cells.len() >= 2 {
        cells.pop();
        cells.remove(0);
    }
    cells
}

/// Whether `line` starts as a password file's line does: a host and a port, one of them or
/// the database saying it (`*`, `localhost` or a name with a dot, `-` or `_` for the host,
/// `*` or PostgreSQL's 5432 to 5439 or PgBouncer's 6432 for the port, `*` for the
/// database), so that `user:1000:…`, a MAC address or `10:20:30:…` are not read as one. The
/// `pgpass` pattern reads the rest.
fn starts_as_pgpass(line: &str) -> bool {
    let mut fields = line.trim_start_matches([' ', '\t']).splitn(3, ':');
    let (Some(host), Some(port)) = (fields.next(), fields.next()) else {
        return false;
    };
    let host_ok = host == "*"
        || (host.starts_with(|c: char| c.is_ascii_alphanumeric())
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')));
    let port_ok =
        port == "*" || ((1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit()));
    let database = fields.next().and_then(|rest| rest.split(':').next());
    let says_it = host == "*"
        || host == "localhost"
        || host.contains(['.', '-', '_'])
        || port == "*"
        || database == Some("*")
        || matches!(
            port,
            "5432" | "5433" | "5434" | "5435" | "5436" | "5437" | "5438" | "5439" | "6432"
        );
    host_ok && port_ok && says_it
}

/// The values of SSM parameters as `aws ssm get-parameter(s) --output text` prints them:
/// one tab-separated line per parameter, its columns in the order of their keys (ARN, data
/// type, date, name, type, value, version). A value is hidden when its type is
/// `SecureString` or its name (the column before the type) names a credential
/// (`/prod/db/password`).
fn aws_text_parameters(text: &str, aws_parameter: &Regex) -> Vec<Range<usize>> {
    aws_parameter
        .captures_iter(text)
        .filter_map(|caps| {
            let (name, kind, value) = (caps.get(1)?, caps.get(2)?, caps.get(3)?);
            (kind.as_str() == "SecureString" || names_a_setting(name.as_str()))
                .then(|| value.range())
                .filter(|value| !value.is_empty())
        })
        .collect()
}

/// The values of the rows of a table of keys and values as the AWS CLI prints them
/// (`--output table`: `||  SecretString  |  …  ||`) whose key names a credential, and a
/// parameter's `Value` row when its `Type` row says `SecureString` or its `Name` row names a
/// credential. A record's rows follow one another, in the order of their keys; any other
/// line ends it.
fn table_rows(text: &str, table_row: &Regex) -> Vec<Range<usize>> {
    let mut hidden = Vec::new();
    let (mut secret_name, mut secure) = (false, false);
    let mut row_end = None;
    for caps in table_row.captures_iter(text) {
        let (Some(row), Some(key), Some(value)) = (caps.get(0), caps.get(1), caps.get(2)) else {
            continue;
        };
        // A row that does not follow the last one starts another record.
        let follows = |end: usize| text[end..row.start()].trim_matches(['\r', '\n']).is_empty();
        if !row_end.is_some_and(follows) {
            (secret_name, secure) = (false, false);
        }
        row_end = Some(row.end());
        let key = key.as_str();
        let hide = if key == "Name" {
            secret_name = names_a_setting(value.as_str());
            false
        } else if key == "Type" {
            secure = value.as_str() == "SecureString";
            false
        } else {
            names_a_credential_in_text(key) || (key == "Value" && (secure || secret_name))
        };
        if hide {
            hidden.push(value.range());
        }
    }
    hidden
}

struct Patterns {
    pgpass: Regex,
    aws_keys: Regex,
    json_data: Regex,
    json_value: Regex,
    aws_parameter: Regex,
    aws_secret: Regex,
    table_row: Regex,
}

static PATTERNS: LazyLock<Option<Patterns>> = LazyLock::new(|| {
    let compile = |pattern: &str| Regex::new(pattern).ok();
    Some(Patterns {
        // A host name or address (or `*`), a port (or `*`), then a database and a user
        // (`\:` escapes a colon in them), each without blanks or `/` (so `grep -n`'s
        // `file:line:https://host:port` is not read as one), and a password without an
        // unescaped colon: five fields exactly, where `/etc/passwd` has seven.
        pgpass: compile(concat!(
            r"(?m)^[ \t]*(?:\*|[A-Za-z0-9][A-Za-z0-9._-]*):(?:\*|[0-9]{1,5})",
            r":(?:[^:\s\\/]|\\.)+:(?:[^:\s\\/]|\\.)+:((?:[^:\s\\]|\\.)(?:[^:\r\n\\]|\\.)*)\r?$",
        ))?,
        // The secret key and session token of `CREDENTIALS` (the access key's ID, the
        // expiry, the secret, the token), and the secret key of `ACCESSKEY` (the ID, the
        // date, the secret, …).
        aws_keys: compile(concat!(
            r"(?m)^CREDENTIALS\t[^\t\r\n]*\t[^\t\r\n]*\t([^\t\r\n]+)\t([^\t\r\n]+)",
            r"|^ACCESSKEY\t[^\t\r\n]*\t[^\t\r\n]*\t([^\t\r\n]+)",
        ))?,
        json_data: compile(r#""(data|stringData)"\s*:\s*\{"#)?,
        json_value: compile(r#""(?:[^"\\]|\\.)*"\s*:\s*("(?:[^"\\]|\\.)*")"#)?,
        aws_parameter: compile(r"\t([^\t\r\n]*)\t(SecureString|String|StringList)\t([^\t\r\n]*)")?,
        // `aws secretsmanager get-secret-value --output text`: the ARN, the date, the name,
        // the secret, its version's identifier.
        aws_secret: compile(concat!(
            r"(?m)^arn:aws[a-z-]*:secretsmanager:[^\t\r\n]*\t[0-9][0-9T:.+-]*\t[^\t\r\n]*",
            r"\t([^\t\r\n]+)\t[0-9A-Za-z-]{32,36}\r?$",
        ))?,
        // A Markdown table's rows (`| token | The access token |`) are not read: they
        // describe more often than they hold.
        table_row: compile(concat!(
            r"(?m)^\|\|+[ \t]+([A-Za-z][A-Za-z0-9_.-]*)[ \t]+\|[ \t]+",
            r"(\S(?:[^|\r\n]*\S)?)[ \t]+\|+\r?$",
        ))?,
    })
});
