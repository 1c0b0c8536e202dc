//! Credentials that free text names: a tool's output of `env` or `cat .env`, a command line,
//! a header block, a configuration file or source code, with every value that a name says
//! is a credential replaced, as a JSON field of that name would be.
//!
//! What is read as a credential's value:
//! - after a name and `=`, `:`, `=>` (Ruby, PHP, Perl: quoted values only, so an arrow
//!   function keeps its body), `:=` (Go), `||=` (Ruby) or `?=` (make): `GITHUB_TOKEN=…`,
//!   `PGPASSWORD="…"`, `password: …`, `x-relay-client-token: …`, `--password=…`,
//!   `os.environ["API_KEY"] = …`;
//! - a YAML block scalar under such a name (`password: |` and the lines indented below it,
//!   also in a list item, under a quoted key or in a diff) and a heredoc (`key = <<EOF`);
//! - `key` and `sig` in a URL's query;
//! - a setting given as a name and a value: the text of an XML element named for a
//!   credential, `<add key="…" value="…" />`, `name: …` and `value: …` in any case and
//!   either order, maybe with a field or two between (a Kubernetes container's environment,
//!   Terraform's `set` blocks, JSON printed compact or indented, `aws ssm get-parameter`),
//!   and a call's first two arguments (`define('DB_PASSWORD', '…')`,
//!   `os.Setenv("TOKEN", "…")`);
//! - a URL's password (`postgres://app:…@db`, to the last `@`), curl's `-u user:…`, a
//!   `.netrc` password, `--password …`, and the password after `-p` of sshpass, a registry
//!   login, mongosh and a MySQL client (`-p…`, attached), and redis-cli's `-a`.
//!
//! A value is what a quote opens and closes, also an escaped one (`\"…\"`, JSON inside a
//! string, and deeper: `\\\"…\\\"`). Unquoted, after `:` at the start of a line (a header,
//! YAML) it is the rest of the line; elsewhere it ends at a blank, and also at the quote
//! that opened just before the name (`"PASSWORD=…"`) or, in a query string, at `&` and at
//! the characters that end a URL; an authentication scheme (`Basic`, `Bearer`, …) takes the
//! word after it along.
//!
//! Applied twice it changes nothing more. Linear in the text: a name inside a value already
//! hidden is not looked at again, and every value read past its line is bounded.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ops::Range;
use std::sync::LazyLock;

use regex::{Captures, Regex};

use super::{CREDENTIAL_FIELD, HASH_OPENING, is_left_hash, names_a_credential};

mod printed;

/// How many times a text that changed is read again.
const MAX_PASSES: usize = 4;

/// `text` with the credentials it names written `[REDACTED:credential]`; see the module.
///
/// Hiding a value can join what was around it into something another rule reads (a `<`
/// inside a hidden word lets an element close around it), so a changed text is read again
/// until nothing more changes: a text with nothing to hide is read once, one with
/// something twice.
pub(super) fn hide_named_in_text(text: &str) -> Cow<'_, str> {
    let mut hidden = match hide_once(text) {
        Cow::Borrowed(text) => return Cow::Borrowed(text),
        Cow::Owned(hidden) => hidden,
    };
    for _ in 0..MAX_PASSES {
        match hide_once(&hidden) {
            Cow::Borrowed(_) => break,
            Cow::Owned(more) => hidden = more,
        }
    }
    Cow::Owned(hidden)
}

fn hide_once(text: &str) -> Cow<'_, str> {
    // Every rule reads a name and a value apart, so a text with nothing between them (a
    // JSON key, a role, a model's name, one word) has nothing to hide: most strings of a
    // record are such, and each would otherwise pay for every pattern's search.
    if !text.contains([' ', '\t', '\n', '\r', '=', ':', '<', '(', '|']) {
        return Cow::Borrowed(text);
    }
    let Some(p) = &*PATTERNS else {
        return Cow::Borrowed(text);
    };
    let mut hidden = after_names(text, &p.named);
    // A URL's password is hidden before the detectors run too (see `hide_url_passwords`),
    // and again here in case hiding something else joined one.
    hidden.extend(url_passwords(text, &p.url_password));
    for caps in p.curl_user.captures_iter(text) {
        hidden.extend(caps.get(1).map(|value| value.range()));
    }
    let dsn = holding(text, &["@tcp(", "@unix(", "sqlplus", "jdbc:oracle:"]);
    for caps in p.user_password.captures_iter(dsn) {
        hidden.extend(first_group(&caps).map(|value| value.range()));
    }
    let mut value_lines = ValueLines::default();
    let flags = p.flag.captures_iter(text).filter_map(move |caps| {
        let (flag, value) = (caps.get(1)?, caps.get(2)?);
        let secret = names_a_secret_flag(flag.as_str(), value.as_str())
            || (flag.as_str() == "value" && value_lines.set_a_secret(text, value.start()));
        secret.then_some(value)
    });
    let setters = holding(
        text,
        &[
            "config",
            "secrets set",
            "env:set",
            "setx",
            "set -",
            "setenv",
            "ENV",
        ],
    );
    let config_values = p.config_set.captures_iter(setters).filter_map(|caps| {
        let (name, value) = (caps.get(1).or_else(|| caps.get(2))?, caps.get(3)?);
        let name = name.as_str().trim_matches(['"', '\'']);
        (names_a_setting(name) || names_a_secret_key(name)).then_some(value)
    });
    // `password …` (a `.netrc`).
    let spaced = holding(text, &["password"]);
    // SQL's passwords, in any case, and `aws configure`'s prompt.
    let sql = holding(
        text,
        &[
            "assword",
            "ASSWORD",
            "dentified",
            "DENTIFIED",
            "Secret Access Key [",
        ],
    );
    let starts = p
        .spaced
        .captures_iter(spaced)
        .chain(p.password_flag.captures_iter(text))
        .chain(p.sql_password.captures_iter(sql))
        .filter_map(|caps| first_group(&caps))
        .chain(flags)
        .chain(config_values)
        .map(|value| value.start());
    for start in starts {
        hidden.push(start..start + value_len(&text[start..], End::blank()));
    }
    // Only under a table's header (`Key   Value` over `---   -----`), so that a help text's
    // aligned columns keep their words, and most texts are not read for rows.
    let table = holding(text, &["Value\n---", "Value\r\n---"]);
    for caps in p.table_row.captures_iter(table) {
        if let (Some(name), Some(value)) = (caps.get(1), caps.get(2))
            && names_a_credential_in_text(name.as_str())
        {
            hidden.push(value.range());
        }
    }
    for caps in p.element.captures_iter(text) {
        let (Some(open), Some(close)) = (caps.get(1), caps.get(4)) else {
            continue;
        };
        // The name without its namespace prefix (`ns:password`).
        let name = open.as_str().rsplit(':').next().unwrap_or_default();
        if open.as_str() == close.as_str() && names_a_credential_in_text(name) {
            hidden.extend(non_blank(caps.get(2).or_else(|| caps.get(3))));
        }
    }
    for caps in p.setting.captures_iter(text) {
        let name = caps.get(1).or_else(|| caps.get(2));
        if name.is_some_and(|name| names_a_credential_in_text(name.as_str())) {
            hidden.extend(non_blank(caps.get(3).or_else(|| caps.get(4))));
        }
    }
    hidden.extend(settings(text, p));
    hidden.extend(printed::printed_credentials(text));
    for caps in p.call.captures_iter(text) {
        let (Some(whole), Some(name)) = (caps.get(0), first_group(&caps)) else {
            continue;
        };
        // The value starts at the quote the match ends with; `""` holds nothing to hide.
        let start = whole.end() - 1;
        let len = value_len(&text[start..], End::blank());
        if names_a_credential_in_text(name.as_str()) && len > 2 {
            hidden.push(start..start + len);
        }
    }
    replace(text, hidden)
}

/// `text` with every URL's password written `[REDACTED:credential]`
/// (`postgres://app:…@db.example.com`).
///
/// Run before the detectors: the `email` detector reads the end of such a password, its
/// `@` and the host as an address (`Passw0rd@db.example.com`), and once that is replaced
/// the rest of the password (`Secret!`) no longer reads as one.
pub(super) fn hide_url_passwords(text: &str) -> Cow<'_, str> {
    let Some(p) = &*PATTERNS else {
        return Cow::Borrowed(text);
    };
    replace(text, url_passwords(text, &p.url_password))
}

/// Where the passwords of the URLs in `text` lie.
fn url_passwords(text: &str, url_password: &Regex) -> Vec<Range<usize>> {
    // A URL in JSON may escape its slashes (`mysql:\/\/`).
    url_password
        .captures_iter(holding(text, &["://", ":\\/\\/"]))
        .filter_map(|caps| {
            caps.get(1).or_else(|| {
                // A port and a path (`https://host:8443/users/@bob`) hold no password.
                caps.get(2).filter(|password| {
                    let before_path = password.as_str().split(['/', '?', '#']).next();
                    !before_path.is_some_and(|port| {
                        !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
                    })
                })
            })
        })
        .map(|password| password.range())
        .collect()
}

/// `text` when it holds one of `words`, and nothing otherwise: a pattern with no literal for
/// the regex crate to search for first reads every byte, so it runs only where it can match.
fn holding<'t>(text: &'t str, words: &[&str]) -> &'t str {
    if words.iter().any(|word| text.contains(word)) {
        text
    } else {
        ""
    }
}

/// `text` with each of `hidden` written `[REDACTED:credential]`; ranges that overlap are
/// hidden as one. Still borrowed when every range is a value hidden before, so a text read
/// again after hiding is not read a third time.
fn replace(text: &str, mut hidden: Vec<Range<usize>>) -> Cow<'_, str> {
    if hidden.is_empty() {
        return Cow::Borrowed(text);
    }
    hidden.sort_unstable_by_key(|range| (range.start, range.end));
    let mut out = String::with_capacity(text.len());
    let (mut at, mut changed) = (0, false);
    for Range { start, end } in hidden {
        if start < at {
            // Within one already hidden: it hides on to the further end.
            changed |= end > at;
            at = at.max(end);
            continue;
        }
        changed |= &text[start..end] != CREDENTIAL_FIELD;
        out.push_str(&text[at..start]);
        out.push_str(CREDENTIAL_FIELD);
        at = end;
    }
    if !changed {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

/// The names of a URL's query parameters that are credentials there alone.
const QUERY_CREDENTIALS: [&str; 5] = [
    "key",
    "sig",
    "signature",
    "x-amz-signature",
    "x-goog-signature",
];

/// Whether free text's `name` names a credential: as a JSON field's would, but for `tokens`
/// alone, which in prose, printed usage and XML is a count (`Input tokens: 1234`).
fn names_a_credential_in_text(name: &str) -> bool {
    !name.eq_ignore_ascii_case("tokens") && names_a_credential(name)
}

/// Whether `name` is an environment variable's (capitals, digits and `_`) ending in `_KEY`
/// (`APP_KEY`, `HMAC_KEY`, `LICENSE_KEY`), and not a public key's (`STRIPE_PUBLISHABLE_KEY`,
/// `SSH_PUBLIC_KEY`, a `GPG_KEY` fingerprint).
fn names_a_secret_key(name: &str) -> bool {
    name.ends_with("_KEY")
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !["_PUBLIC_KEY", "_PUBLISHABLE_KEY", "_PUB_KEY", "GPG_KEY"]
            .iter()
            .any(|public| name.ends_with(public))
}

/// How many other fields may stand between a setting's name and its value, or its value and
/// its name: AWS's `Type`, Azure's `slotSetting`.
const MAX_FIELDS_BETWEEN: usize = 2;

/// Where the values of settings printed as a `name` field and a `value` field lie (see
/// [`Patterns::setting_key`]), when the name names a credential, or its last segment does
/// (`/prod/db/api-key`, AWS's parameter names), or a field before the value says it is a
/// secret whatever the name: `"Type": "SecureString"` (an AWS parameter kept encrypted),
/// `"sensitive": true` (a Terraform output), `"keyName"` for the name (an Azure account key);
/// and every setting of a text that shows an Azure Key Vault secret.
///
/// Read field by field from each `name` or `value` key, at most a few fields on: a second
/// name or value starts the next setting, so the value of one is never taken for another's.
fn settings(text: &str, p: &Patterns) -> Vec<Range<usize>> {
    let mut hidden = Vec::new();
    // `az keyvault secret show` prints one secret, its `id` naming the vault's secret: its
    // value is one whatever its name.
    let vault_secret = text.contains(".vault.azure.net/secrets/");
    // Keys before this belong to a setting already read.
    let mut read_to = 0;
    // Where the line of the last value hidden starts, found going forward only.
    let (mut line_start, mut scanned_to) = (0, 0);
    for key in p.setting_key.find_iter(text) {
        if key.start() < read_to {
            continue;
        }
        let (mut name, mut value, mut secure) = (None, None, vault_secret);
        let mut at = key.start();
        for _ in 0..MAX_FIELDS_BETWEEN + 2 {
            // A field is read within a bounded slice, so a line of keys is read in linear
            // time however long it is.
            let rest = &text[at..floor_char_boundary(text, at + MAX_FIELD_BYTES)];
            if (name.is_some() || secure)
                && let Some(opening) = p.value_key.find(rest)
            {
                // A value after its name is read as any named value is: quoted over lines,
                // or to the end of its line when it has a line of its own.
                let start = at + opening.end();
                if secure || name.is_some_and(names_a_setting) {
                    let own_line = text[key.start()..start].contains('\n');
                    let end = if own_line { End::Line } else { End::blank() };
                    if let Some(newline) = text[scanned_to..at].rfind('\n') {
                        line_start = scanned_to + newline + 1;
                    }
                    scanned_to = at;
                    let line = &text[line_start..];
                    let len = block_scalar_len(&text[start..], line, at - line_start)
                        .unwrap_or_else(|| value_len(&text[start..], end));
                    hidden.push(start..start + len);
                    at = start + len;
                } else {
                    at = start;
                }
                break;
            }
            let Some(field) = p.field.captures(rest) else {
                break;
            };
            let (Some(whole), Some(field_key), Some(field_value)) =
                (field.get(0), field.get(1), field.get(2))
            else {
                break;
            };
            let field_key = field_key.as_str();
            let keyname = field_key.eq_ignore_ascii_case("keyName");
            if keyname || field_key.eq_ignore_ascii_case("name") {
                if name.is_some() {
                    break;
                }
                name = Some(field_value.as_str().trim_matches(['"', '\'', '\\']));
                // An account key as Azure lists it (`"keyName": "key1", …, "value": …`).
                secure |= keyname;
            } else if field_key.eq_ignore_ascii_case("value") {
                if value.is_some() {
                    break;
                }
                value = Some(at + field_value.start()..at + field_value.end());
            } else if field_key.eq_ignore_ascii_case("type") {
                secure |= field_value.as_str().contains("SecureString");
            } else if field_key.eq_ignore_ascii_case("sensitive") {
                // `terraform output -json`: `"sensitive": true, "type": …, "value": …`.
                secure |= field_value.as_str() == "true";
            }
            at += whole.end();
            if let (Some(name), Some(value)) = (name, &value) {
                // A value before its name (`{"value": …, "name": "DB_PASSWORD"}`) was read
                // as a field: on one line.
                if secure || names_a_setting(name) {
                    hidden.push(value.clone());
                }
                break;
            }
        }
        // The keys of the fields read are not read again.
        read_to = at;
    }
    hidden
}

/// The longest field of a setting read (its key, its value and what follows it).
const MAX_FIELD_BYTES: usize = 1024;

/// `at`, or the start of the character it falls in, and at most `text`'s end.
fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Whether a long flag's value is a secret: its name names a credential, but for a switch
/// that takes none (`--no-password`, `--ask-pass`, `--with-token`), an identifier
/// (`--secret-id`), and a help text's placeholder for it (`--token TOKEN`).
fn names_a_secret_flag(flag: &str, value: &str) -> bool {
    names_a_credential_in_text(flag)
        && !["no-", "ask-", "with-"].iter().any(|p| flag.starts_with(p))
        && !flag.ends_with("-id")
        && !value.eq_ignore_ascii_case(&flag.replace('-', "_"))
        && !value.eq_ignore_ascii_case(flag)
        && !holds_nothing(value)
        // The type a help text gives for the value (cobra's `--password string`).
        && !matches!(
            value,
            "string" | "strings" | "stringArray" | "stringSlice" | "int" | "uint" | "bool" | "duration" | "float"
        )
}

/// Whether the lines of a text's `--value` flags set a secret ([`value_flag_is_secret`]),
/// each line judged once however many it holds.
#[derive(Default)]
struct ValueLines {
    /// Where the last line judged ends, and its verdict.
    last: Option<(usize, bool)>,
}

impl ValueLines {
    /// Whether the line `at` falls in sets a secret; `at` never goes back.
    fn set_a_secret(&mut self, text: &str, at: usize) -> bool {
        if let Some((end, secret)) = self.last
            && at < end
        {
            return secret;
        }
        let line = line_around(text, at);
        let secret = value_flag_is_secret(&text[line.clone()]);
        self.last = Some((line.end, secret));
        secret
    }
}

/// Whether a command line's `--value` is a secret's: it sets an AWS parameter kept
/// encrypted (`--type SecureString`), a secret in a vault (`az keyvault secret set`), or a
/// setting whose `--name` names a credential (`aws ssm put-parameter --name /prod/db/password`).
fn value_flag_is_secret(line: &str) -> bool {
    line.contains("SecureString")
        || line.contains("secret set")
        || line.split("--name").skip(1).any(|after| {
            let name = after.trim_start_matches([' ', '\t', '=']);
            let name = &name[..name.find(char::is_whitespace).unwrap_or(name.len())];
            names_a_setting(name.trim_matches(['"', '\'']))
        })
}

/// Where the line of `text` that `at` falls in lies.
fn line_around(text: &str, at: usize) -> Range<usize> {
    let start = text[..at].rfind('\n').map_or(0, |newline| newline + 1);
    let end = text[at..]
        .find('\n')
        .map_or(text.len(), |newline| at + newline);
    start..end
}

/// Whether a setting's name names a credential, whole or by its last segment after a `/`,
/// `.` or `:` (AWS's `/prod/db/api-key`, git's `github.token`, npm's
/// `//registry.npmjs.org/:_authToken`).
fn names_a_setting(name: &str) -> bool {
    names_a_credential_in_text(name)
        || name
            .rsplit(['.', '/', ':'])
            .next()
            .is_some_and(names_a_credential_in_text)
}

/// Where `value` lies, unless it holds nothing but blanks (an empty setting).
fn non_blank(value: Option<regex::Match<'_>>) -> Option<Range<usize>> {
    value
        .filter(|v| !v.as_str().trim().is_empty())
        .map(|v| v.range())
}

/// The first capture group that took part in the match.
fn first_group<'t>(caps: &Captures<'t>) -> Option<regex::Match<'t>> {
    caps.iter().skip(1).flatten().next()
}

/// The values after each name and separator that `named` finds.
fn after_names(text: &str, named: &Regex) -> Vec<Range<usize>> {
    let mut hidden = Vec::new();
    let mut hidden_to = 0;
    // Where the line of the last name looked at starts, found going forward only.
    let (mut line_start, mut scanned_to) = (0, 0);
    for found in named.find_iter(text) {
        if found.start() < hidden_to {
            continue;
        }
        let head = found.as_str();
        let name_end = head
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
            .unwrap_or(head.len());
        let before_text = &text[..found.start()];
        let before = before_text.chars().next_back();
        // After `?` or `&`, also as HTML (`&amp;`) and JSON (`\u0026`) escape it; the
        // escape's digits read as the start of the name.
        let escaped = head.strip_prefix("u0026").filter(|_| before == Some('\\'));
        let name = &head[..name_end][head.len() - escaped.unwrap_or(head).len()..];
        let in_query = matches!(before, Some('?' | '&'))
            || escaped.is_some()
            || before_text.ends_with("&amp;");
        // `key`, `sig` and a signature alone are credentials in a URL's query (`?key=…`, a
        // shared access signature's `&sig=…`, a presigned URL's `X-Amz-Signature=…`), and
        // ordinary words elsewhere.
        let in_query_named = in_query
            && QUERY_CREDENTIALS
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n));
        // `APP_KEY=…` as an environment or a `.env` file sets it; source code's constants
        // (`const ENTER_KEY = 13`, `STORAGE_KEY = 'todos'`) keep their values.
        let env_key = head[name_end..].starts_with('=') && names_a_secret_key(name);
        if !(names_a_credential_in_text(name)
            || in_query_named
            || env_key
            || names_with_word_before(before_text, name, &text[found.end()..]))
        {
            continue;
        }
        // `crate::auth::{…}`, `Token::new`, a log's `app::auth:`, a match arm's
        // `Credential::Password => …`: a path, not a name (`Config::password = …` assigns,
        // and is read).
        let separator_end = head.trim_end_matches([' ', '\t']);
        let colon = separator_end.ends_with(':');
        let in_path = before_text.ends_with("::") && (colon || separator_end.ends_with("=>"));
        if in_path || (colon && text[found.end()..].starts_with(':')) {
            continue;
        }
        // A hash the redactor left (`[HASH:api_key:0123456789ab]`) names the detector that
        // found a value, and what follows is the hash: hidden, equal values would no longer
        // correlate, and the bracket would be left open. Only that exact shape is passed
        // over, so text cannot borrow it to keep a value.
        if before_text.ends_with(HASH_OPENING) && is_left_hash(&text[found.end()..]) {
            continue;
        }
        // `arn:aws:secretsmanager:…:secret:prod/db` names a secret, and holds none.
        if before == Some(':') && word_before(before_text).starts_with("arn:") {
            continue;
        }
        let rest = &text[found.end()..];
        // A connection string's value in braces (`Password={…};`), which may hold `;`.
        if head.ends_with('=')
            && let Some(len) = braced_len(rest)
        {
            hidden.push(found.end()..found.end() + len);
            hidden_to = found.end() + len;
            continue;
        }
        // `token == expected`: a comparison, not a value. `"credentials": {` opens an
        // object, and `"secrets": [{` a list of them, whose own names are read one by one.
        if rest.starts_with(['=', '{'])
            || rest
                .strip_prefix('[')
                .is_some_and(|items| items.trim_start().starts_with('{'))
        {
            continue;
        }
        // `"Password: "`, a prompt: the quote after the name closes the string it stands in
        // (`"password="$PW` joins a value to it, and is read).
        if let Some(quote @ ('"' | '\'')) = before
            && !head.contains(quote)
            && let Some(after) = rest.strip_prefix(quote)
            && !after.starts_with(|c: char| c.is_alphanumeric() || c == '$')
        {
            continue;
        }
        // Terraform's `(sensitive value)` in a plan.
        if rest.starts_with("(sensitive value)") || rest.starts_with("(sensitive)") {
            continue;
        }
        let separator = head.trim_end_matches([' ', '\t']);
        // `token => token.id` is an arrow function, `Kind::Token => …` a match arm; Ruby's,
        // PHP's and Perl's values after `=>` are quoted.
        if separator.ends_with("=>") && !rest.starts_with(['"', '\'']) {
            continue;
        }
        if let Some(newline) = text[scanned_to..found.start()].rfind('\n') {
            line_start = scanned_to + newline + 1;
        }
        scanned_to = found.start();
        let by_colon = separator.ends_with(':');
        let quote = before.filter(|c| matches!(c, '"' | '\''));
        let end = if by_colon && text[line_start..found.start()].trim().is_empty() {
            End::Line
        } else if by_colon && name.to_ascii_lowercase().ends_with("cookie") {
            // A cookie header's pairs anywhere (curl's `> Cookie: …`, `-H "Cookie: …"`, a
            // log's `headers={Cookie: …}`), `name=value` joined by `; `.
            End::Pairs
        } else {
            End::Blank {
                quote,
                in_query,
                in_list: before == Some(';')
                    || (["password", "pwd"]
                        .iter()
                        .any(|n| name.eq_ignore_ascii_case(n))
                        && head[name_end..].trim() == "="
                        && setting_follows(rest)),
            }
        };
        let quoted_key = matches!(before, Some('"' | '\''));
        let key_column = (found.start() - line_start).saturating_sub(usize::from(quoted_key));
        let value = if by_colon
            && let Some(len) = block_scalar_len(rest, &text[line_start..], key_column)
        {
            0..len
        } else if let Some(len) = heredoc_len(rest) {
            0..len
        } else if let Some(items) = list_items(rest) {
            items
        } else if by_colon && let Some(start) = after_type(rest) {
            // `API_TOKEN: &str = "…"`: the type stays, the value after it goes.
            start..start + value_len(&rest[start..], End::blank())
        } else {
            let mut len = value_len(rest, end);
            // A JSON key's unquoted value (`"pin": 1234,`) ends where the next field starts.
            if head[name_end..].starts_with(['"', '\'', '\\'])
                && !rest.starts_with(['"', '\'', '\\', '['])
            {
                len = json_value_len(&rest[..len]);
            }
            // `process.env.JWT_SECRET || '…'`, `os.getenv("X") or "…"`: the default too.
            0..len + fallback_len(&rest[len..])
        };
        if !value.is_empty() && !holds_nothing(&rest[value.clone()]) {
            hidden.push(found.end() + value.start..found.end() + value.end);
            hidden_to = found.end() + value.end;
        }
    }
    hidden
}

/// The length of a value in braces that `rest` starts (`{My;Pa55}`, `}}` escaping a brace
/// inside), as ODBC and Azure SQL connection strings quote a password, when it closes on its
/// line before `;`, a quote, a blank or the end; `None` for anything else (an object).
fn braced_len(rest: &str) -> Option<usize> {
    let inside = rest.strip_prefix('{')?;
    let mut at = 0;
    let line = &inside[..line_len(&inside[..floor_char_boundary(inside, MAX_FIELD_BYTES)])];
    while let Some(close) = line[at..].find('}') {
        at += close + 1;
        if line[at..].starts_with('}') {
            at += 1;
            continue;
        }
        let ends = line[at..].is_empty() || line[at..].starts_with([';', '"', '\'', ' ', '\t']);
        let holds = &line[..at - 1];
        // `{token}` is a format string's placeholder (`f"token={token}"`), not a value.
        let placeholder = holds
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'));
        return (ends && !holds.is_empty() && !placeholder && !holds.contains(['"', ':', '{']))
            .then_some(1 + at);
    }
    None
}

/// How much of `word`, an unquoted value after a JSON key, is the value: up to a `,` that a
/// next key's quote follows, or a `}` or `]` that closes around it; all of it otherwise.
fn json_value_len(word: &str) -> usize {
    // Only the ASCII marks are looked after, each up to the next non-blank: linear.
    word.bytes()
        .enumerate()
        .find(|&(at, b)| {
            let after = || word[at + 1..].trim_start();
            match b {
                b',' => after().is_empty() || after().starts_with(['"', '\\']),
                b'}' | b']' => {
                    after().is_empty() || after().starts_with([',', '}', ']', '"', '\\'])
                }
                _ => false,
            }
        })
        .map_or(word.len(), |(at, _)| at)
}

/// The length of a quoted default that `rest` gives after a value read from elsewhere
/// (` || '…'`, ` ?? "…"`, ` or "…"`), or 0.
fn fallback_len(rest: &str) -> usize {
    let trimmed = rest.trim_start_matches([' ', '\t']);
    let Some(after) = ["||", "??", "or"]
        .iter()
        .find_map(|op| trimmed.strip_prefix(op))
        .filter(|after| after.starts_with([' ', '\t']))
    else {
        return 0;
    };
    let quoted = after.trim_start_matches([' ', '\t']);
    if !quoted.starts_with(['"', '\'']) {
        return 0;
    }
    rest.len() - quoted.len() + value_len(quoted, End::blank())
}

/// Whether `name`, with the word before it (one blank between), names a credential when
/// `name` alone does not: near the start of its line, as a label is (`API key: …`, `Secret
/// Access Key: …`, `   S3 Secret Key: …`, at most one more word before them), or anywhere
/// when what follows has a secret's shape (`Here is your API key: 9f8e7d6c5b4a3928`). In a
/// sentence (`Create an API key: go to Settings`) they are words.
fn names_with_word_before(before: &str, name: &str, rest: &str) -> bool {
    // Only the last words of such names (`key`, `string`, `data`) are looked at: every other
    // name a text holds is passed over without joining it to anything.
    let Some(before) = before.strip_suffix(' ').filter(|_| {
        ["key", "string", "data"]
            .iter()
            .any(|w| name.eq_ignore_ascii_case(w))
    }) else {
        return false;
    };
    let word = last_word(before, MAX_WORD_LEN + 1, |c| !c.is_ascii_alphanumeric());
    if word.is_empty()
        || word.len() > MAX_WORD_LEN
        || name.len() > MAX_WORD_LEN
        || !names_a_credential_in_text(&format!("{word}_{name}"))
    {
        return false;
    }
    // What stands before the two words on their line: blanks, and at most one word.
    let head = &before[..before.len() - word.len()];
    let prefix = last_word(head, MAX_WORD_LEN + 2, |c| c == '\n');
    let starts_line =
        prefix.len() == head.len() || head[..head.len() - prefix.len()].ends_with('\n');
    (starts_line && prefix.split_whitespace().count() <= 1) || token_shaped(rest)
}

/// Whether the word `rest` starts with (after blanks) has a secret's shape: at least 12
/// characters without blanks, mixing letters and digits (`Here is your API key: 9f8e7d…`,
/// and not `Create an API key: go to Settings`).
fn token_shaped(rest: &str) -> bool {
    let rest = rest.trim_start_matches([' ', '\t']);
    let word = &rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())];
    word.len() >= 12
        && word.bytes().any(|b| b.is_ascii_digit())
        && word.bytes().any(|b| b.is_ascii_alphabetic())
}

/// The longest word [`names_with_word_before`] joins.
const MAX_WORD_LEN: usize = 32;

/// Whether a value read after a credential's name holds nothing to hide: JSON's and
/// Python's literals (`"token": null`, `"auth": true`, `always-auth=false`), an empty
/// string, a type (`pub token: String,`, `password: &str)`, `secret: string;`), a bracket
/// that closes around the name (`[env: API_TOKEN=]`), a help text's placeholder (`--token
/// <TOKEN>`, letters only) and `kubectl describe secret`'s size (`password:  16 bytes`).
fn holds_nothing(value: &str) -> bool {
    let value = value.trim_end_matches([',', ';', ')']);
    matches!(
        value,
        "null" | "true" | "false" | "None" | "nil" | "\"\"" | "''"
    ) || TYPE_NAMES.contains(&value)
        || matches!(value, "" | "]" | "}")
        || value
            .strip_prefix('<')
            .and_then(|v| v.strip_suffix('>'))
            .is_some_and(|inside| {
                !inside.is_empty()
                    && inside
                        .bytes()
                        .all(|b| b.is_ascii_alphabetic() || matches!(b, b'_' | b'-' | b'.'))
            })
        || value
            .strip_suffix(" bytes")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The types source code gives a credential's name, which a value never is.
const TYPE_NAMES: [&str; 14] = [
    "String",
    "string",
    "str",
    "&str",
    "&'static str",
    "Option<String>",
    "Option<&str>",
    "SecretStr",
    "SecretString",
    "Secret<String>",
    "Optional[str]",
    "number",
    "bool",
    "boolean",
];

/// Where the value of a name declared with a type starts, after the type and ` = `
/// (`const API_TOKEN: &str = "…"`, `secret: string = "…"`, `password: str = "…"`); `None`
/// when what follows the name is no type and `=` on its line.
fn after_type(rest: &str) -> Option<usize> {
    let line = &rest[..line_len(&rest[..floor_char_boundary(rest, MAX_FIELD_BYTES)])];
    let eq = line
        .find(" = ")
        .or_else(|| line.strip_suffix(" =").map(str::len))?;
    let ty = &line[..eq];
    let is_type = ty.starts_with(|c: char| c == '&' || c.is_ascii_alphabetic())
        && ty.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '&' | '<' | '>' | '[' | ']' | ':' | '\'' | ',' | ';' | ' ')
        })
        // Blanks only inside brackets or after a lifetime (`&'static str`, `Map<K, V>`).
        && !ty.split(['<', '[']).next().is_some_and(|head| head.trim_end().contains(' ') && !head.contains('\''));
    if !is_type {
        return None;
    }
    let start = eq + " = ".len();
    if start < line.len() {
        return Some(start);
    }
    // A value wrapped onto the next line (`static PASSWORD: &str =\n    "…";`).
    let next = rest[line.len()..].trim_start_matches(['\r', '\n']);
    let value = next.trim_start_matches([' ', '\t']);
    (!value.is_empty() && next.len() + 2 >= rest.len() - line.len())
        .then(|| rest.len() - value.len())
}

/// Whether the value that `rest` starts is followed on its line by `;` and another setting:
/// a connection string's first setting (`Password=My Pa55;Server=db`), whose value may hold
/// blanks as its later ones may (`PWD=My Pa55;UID=sa`). A shell's next assignment is in
/// capitals after a blank (`PASSWORD=… make; CI=1 make`), and its command's words are not
/// the value.
fn setting_follows(rest: &str) -> bool {
    let line = &rest[..line_len(&rest[..floor_char_boundary(rest, MAX_FIELD_BYTES)])];
    line.split_once(';').is_some_and(|(_, after)| {
        let spaced = after.starts_with([' ', '\t']);
        let after = after.trim_start();
        let name = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, ' ' | '_')))
            .map_or(after, |end| &after[..end]);
        after[name.len()..].starts_with('=')
            && name.starts_with(|c: char| c.is_ascii_alphabetic())
            && (!spaced || name.contains(|c: char| c.is_ascii_lowercase()))
    })
}

/// The word that `before` ends with: after its last blank or quote, within its last
/// [`MAX_WORD_BEFORE`] bytes.
fn word_before(before: &str) -> &str {
    // An ARN's start is never that far from its names.
    last_word(before, MAX_WORD_BEFORE, |c| {
        c.is_whitespace() || matches!(c, '"' | '\'')
    })
}

/// The end of `before` after the last character `ends` holds for, looked for within its last
/// `window` bytes only, so that a long run of names is read in linear time.
fn last_word(before: &str, window: usize, ends: impl Fn(char) -> bool) -> &str {
    let mut from = before.len().saturating_sub(window);
    while !before.is_char_boundary(from) {
        from += 1;
    }
    let window = &before[from..];
    let start = window
        .char_indices()
        .rev()
        .find(|&(_, c)| ends(c))
        .map_or(0, |(at, c)| at + c.len_utf8());
    &window[start..]
}

/// How far back [`word_before`] looks.
const MAX_WORD_BEFORE: usize = 256;

/// Where an unquoted value ends.
#[derive(Clone, Copy)]
enum End {
    /// At the line's end.
    Line,
    /// After the last of `name=value` pairs joined by `;` and blanks (a cookie header's).
    Pairs,
    /// At a blank, or at this quote; in a query string also at `&` and at what ends a URL,
    /// and in a list of settings joined by `;` (a connection string) at `;`.
    Blank {
        quote: Option<char>,
        in_query: bool,
        in_list: bool,
    },
}

impl End {
    fn blank() -> End {
        End::Blank {
            quote: None,
            in_query: false,
            in_list: false,
        }
    }
}

/// Where the items of a list or a tuple that opens `rest` lie (`["…", "…"]`, also over
/// lines; `("bob", "…")`): inside its brackets, to the one that closes it outside quotes (a
/// list inside it, or a value already hidden, is inside it too), bounded as a quoted value
/// is; to the end of the line when it does not close by then. `None` when `rest` opens
/// neither, or holds what a redactor left (`[REDACTED:…]`, `[HASH:…]`).
fn list_items(rest: &str) -> Option<Range<usize>> {
    let (open, close) = match rest.chars().next()? {
        // A tuple too (`auth=("bob", "…")`).
        '(' => ('(', ')'),
        '[' if !(rest.starts_with("[REDACTED:") || rest.starts_with("[HASH:")) => ('[', ']'),
        _ => return None,
    };
    let mut quote = None;
    let mut escaped = false;
    let (mut depth, mut lines) = (0, 0);
    for (at, c) in rest.char_indices() {
        if at > MAX_SPANNED_VALUE || lines > MAX_SPANNED_LINES {
            break;
        }
        match (quote, c) {
            _ if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (_, '\n') => lines += 1,
            (None, '"' | '\'') => quote = Some(c),
            (Some(open), _) if c == open => quote = None,
            (None, _) if c == open => depth += 1,
            (None, _) if c == close => {
                depth -= 1;
                if depth == 0 {
                    return Some(1..at);
                }
            }
            _ => {}
        }
    }
    Some(1..line_len(rest))
}

/// Authentication schemes whose next word is the credential (`Authorization: Basic …`).
const AUTH_SCHEMES: [&str; 12] = [
    "basic",
    "bearer",
    "digest",
    "token",
    "negotiate",
    "ntlm",
    "bot",
    "ssws",
    "apikey",
    "api-key",
    "splunk",
    "geniekey",
];

/// The longest value hidden past its line (a quoted value to its closing quote, a heredoc
/// to its end), in bytes and in lines: a 4096-bit RSA key in PEM is about 3.3 KB on 52
/// lines. One that does not end by then hides only the rest of its line, so a stray quote
/// does not hide the whole text, and a text of many is still read in linear time.
const MAX_SPANNED_VALUE: usize = 8 * 1024;
const MAX_SPANNED_LINES: usize = 64;

/// How long the value at the start of `rest` is: see the module.
fn value_len(rest: &str, end: End) -> usize {
    if rest.starts_with(CREDENTIAL_FIELD) {
        return CREDENTIAL_FIELD.len();
    }
    // Python's triple quotes (`"""…"""`), to the three that close them, or, as an unclosed
    // quote, to the end of the line.
    if let Some(triple) = ["\"\"\"", "\'\'\'"]
        .into_iter()
        .find(|t| rest.starts_with(t))
    {
        return match rest[3..floor_char_boundary(rest, MAX_SPANNED_VALUE)].find(triple) {
            Some(close) => 3 + close + 3,
            None => line_len(rest),
        };
    }
    match (rest.chars().next(), end) {
        (Some(quote @ ('"' | '\'')), _) => {
            // To the closing quote, a backslash escaping the next character, over as many
            // lines as the value spans (a key kept in a `.env` file).
            let mut escaped = false;
            let mut line_end = None;
            let mut lines = 0;
            for (at, c) in rest.char_indices().skip(1) {
                if at > MAX_SPANNED_VALUE {
                    break;
                }
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '\n' {
                    line_end.get_or_insert(at);
                    lines += 1;
                    if lines > MAX_SPANNED_LINES {
                        break;
                    }
                } else if c == quote {
                    return at + 1;
                }
            }
            line_end.unwrap_or_else(|| rest.find('\n').unwrap_or(rest.len()))
        }
        (_, End::Line) => line_len(rest),
        (_, End::Pairs) => {
            // Each pair is read once: to its blank, quote, `}` or `,`.
            let word_end = |from: usize| {
                rest[from..]
                    .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '}' | ','))
                    .map_or(rest.len(), |end| from + end)
            };
            let mut end = word_end(0);
            if !rest[..end].contains('=') {
                // No pair (a log's `Session cookie: set for …`): one word, as anywhere.
                return end;
            }
            while rest[..end].ends_with(';') {
                let next = rest.len() - rest[end..].trim_start_matches([' ', '\t']).len();
                let next_end = word_end(next);
                if next == next_end || !rest[next..next_end].contains('=') {
                    break;
                }
                end = next_end;
            }
            end
        }
        (Some('\\'), End::Blank { .. })
            if let run = rest.len() - rest.trim_start_matches('\\').len()
                && run % 2 == 1
                && let Some(quote @ ('"' | '\'')) = rest[run..].chars().next() =>
        {
            escaped_quoted_len(rest, run, quote)
        }
        (
            _,
            End::Blank {
                quote,
                in_query,
                in_list,
            },
        ) => {
            let ends = |c: char| {
                // A connection string's value may hold blanks (`Password=My Pa55;`).
                (if in_list {
                    c == '\n' || c == '\r'
                } else {
                    c.is_whitespace()
                }) || Some(c) == quote
                    || (in_query && matches!(c, '&' | '"' | '\'' | '<' | '>' | '#' | '\\'))
                    || (in_list && c == ';')
            };
            let word = |from: usize| from + rest[from..].find(ends).unwrap_or(rest.len() - from);
            let first = word(0);
            let scheme = AUTH_SCHEMES
                .iter()
                .any(|s| rest[..first].eq_ignore_ascii_case(s));
            let after =
                first + rest[first..].len() - rest[first..].trim_start_matches([' ', '\t']).len();
            if scheme && after > first && after < rest.len() {
                word(after)
            } else {
                first
            }
        }
    }
}

/// The length of a value that `rest` opens with a `quote` escaped by `run` backslashes
/// (`\"…\"`, JSON inside a string; `\\\"…\\\"`, JSON inside that): to the quote that closes it.
///
/// Read one level of escaping at a time, a quote after an even number of backslashes is the
/// outermost text's own, and one after an odd number `r` lies one level deeper than a quote
/// after `(r - 1) / 2` (see [`quote_depth`]). The value ends at the first quote at its own
/// depth, which closes it, or at a shallower one, where a string around it ends; quotes
/// deeper than it are inside it. One that does not close on its line hides only the rest of
/// the line, as an unclosed quote does.
fn escaped_quoted_len(rest: &str, run: usize, quote: char) -> usize {
    let depth = quote_depth(run);
    let mut backslashes = 0;
    for (at, c) in rest.char_indices().skip(run + 1) {
        if at > MAX_SPANNED_VALUE || c == '\n' {
            break;
        }
        if c == '\\' {
            backslashes += 1;
            continue;
        }
        if c == quote {
            match quote_depth(backslashes).cmp(&depth) {
                Ordering::Equal => return at + 1,
                Ordering::Less => return at,
                Ordering::Greater => {}
            }
        }
        backslashes = 0;
    }
    line_len(rest)
}

/// How many levels of escaping down a quote after `run` backslashes lies: none after an
/// even number, one after `\`, two after `\\\` (a `\` and a `\"` escaped again), three after
/// seven.
fn quote_depth(mut run: usize) -> usize {
    let mut depth = 0;
    while run % 2 == 1 {
        depth += 1;
        run /= 2;
    }
    depth
}

/// The length of the first line of `text`, without its line break.
fn line_len(text: &str) -> usize {
    text.find(['\r', '\n']).unwrap_or(text.len())
}

/// The length of a YAML block scalar whose header starts `rest` (`|`, `>-`, `|2`, maybe a
/// comment after it): the header's line and the lines below indented further than the key,
/// which starts `key_column` bytes into its line `line`. In a diff or a list item every
/// line starts with a mark (`+`, `-` or a blank), which is not indentation. `None` when
/// `rest` does not start with a header.
fn block_scalar_len(rest: &str, line: &str, key_column: usize) -> Option<usize> {
    // Looked at without reading the rest of the line: most values are not headers, and a
    // long line of names would otherwise be read once per name.
    let indicator_len = rest
        .bytes()
        .take(4)
        .take_while(|b| !b.is_ascii_whitespace())
        .count();
    if !is_block_indicator(&rest.as_bytes()[..indicator_len]) {
        return None;
    }
    // Only blanks and a comment may follow it on its line; what else follows is not read.
    let after = rest[indicator_len..].trim_start_matches([' ', '\t']);
    if !(after.is_empty() || after.starts_with(['\r', '\n', '#'])) {
        return None;
    }
    let header = &rest[..line_len(rest)];
    let mark = usize::from(line.starts_with(['+', '-', ' ']));
    let key_indent = key_column.saturating_sub(mark);
    // Every line of the scalar is hidden, however many: a name inside it is not read
    // again, so the text is still read once.
    let mut len = header.len();
    let mut at = header.len();
    while let Some(newline) = rest[at..].find('\n') {
        let start = at + newline + 1;
        let this = &rest[start..start + line_len(&rest[start..])];
        let unmarked = match this.strip_prefix(['+', '-', ' ']) {
            Some(unmarked) if mark == 1 => unmarked,
            _ => this,
        };
        let content = unmarked.trim_start_matches([' ', '\t']);
        if !content.is_empty() {
            if unmarked.len() - content.len() <= key_indent {
                break;
            }
            len = start + this.len();
        }
        at = start + this.len();
    }
    Some(len)
}

/// A YAML block scalar's header (`|`, `>-`, `|2+`): the value is on the lines below.
fn is_block_indicator(word: &[u8]) -> bool {
    let chomp = |b: &u8| matches!(b, b'-' | b'+');
    let indent = |b: &u8| matches!(b, b'1'..=b'9');
    match word {
        [b'|' | b'>', modifiers @ ..] => match modifiers {
            [] => true,
            [m] => chomp(m) || indent(m),
            [a, b] => (chomp(a) && indent(b)) || (indent(a) && chomp(b)),
            _ => false,
        },
        _ => false,
    }
}

/// The length of a heredoc whose opening starts `rest` (`<<EOF`, `<<-EOT`, `<<~'EOS'`):
/// through the line that closes it, bounded as a quoted value is; the rest of its line when
/// it does not close by then. `None` when `rest` does not start with one.
fn heredoc_len(rest: &str) -> Option<usize> {
    let opening = rest.strip_prefix("<<")?;
    let opening = opening.strip_prefix(['-', '~']).unwrap_or(opening);
    let quote = opening.starts_with(['\'', '"']);
    let word = &opening[usize::from(quote)..];
    let word = &word[..word
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(word.len())];
    if word.is_empty() {
        return None;
    }
    let first = line_len(rest);
    let mut at = first;
    for _ in 0..MAX_SPANNED_LINES {
        let Some(newline) = rest[at..].find('\n') else {
            break;
        };
        let start = at + newline + 1;
        if start > MAX_SPANNED_VALUE {
            break;
        }
        let this = &rest[start..start + line_len(&rest[start..])];
        if this.trim() == word {
            return Some(start + this.len());
        }
        at = start + this.len();
    }
    Some(first)
}

/// The patterns, constants that the tests compile.
struct Patterns {
    /// A name and what separates it from its value. The name may close a quote, escaped
    /// too (`{\"password\": …}`), and an index (`os.environ["API_KEY"] = …`), but never a
    /// bare bracket, so `vocab[token] =` and the `credential]` of a value already hidden
    /// are not names.
    named: Regex,
    /// A URL's password (`scheme://user:…@`, the user may be empty, the slashes may be
    /// escaped as JSON may write them), to the last `@` before the host: a password's own
    /// `@` is often left unescaped (`postgres://app:p@ss@db`). It never holds a quote, `<`,
    /// `>` or `\`, where a URL in JSON or markup ends.
    url_password: Regex,
    /// curl's password after its user (`-u user:…`, `--user=user:…`, `-uuser:…`); not a
    /// URL (`redis-cli -u redis://…`, whose password is `url_password`'s), nor a value
    /// already hidden (`bob[REDACTED:credential]`).
    curl_user: Regex,
    /// A password between a user and `@` in a data source name with no scheme: Go's
    /// `user:…@tcp(host:3306)/db`, and Oracle's `user/…@` after `sqlplus` or in a JDBC URL.
    user_password: Regex,
    /// A `.netrc` password (`machine … password …`, or a line of its own).
    spaced: Regex,
    /// A long flag and the value after one blank (`--admin-password …`; a help text aligns
    /// its descriptions with more), not a table's `|`; the caller judges the flag's name.
    flag: Regex,
    /// The name and value a `config set` command sets (`aws configure set
    /// aws_secret_access_key …`, `yarn config set npmAuthToken …`, `kubectl config set
    /// users.x.token …`), `git config` and `poetry config` (`git config --global
    /// github.token …`), a secrets manager's `secrets set`, `user-secrets set` and `env:set`,
    /// and an environment's variable set apart from its value (`setx`, `set -gx`, `setenv`,
    /// a Dockerfile's `ENV`); the caller judges the name.
    config_set: Regex,
    /// The password a command takes after a short flag: sshpass's `-p` among its own
    /// options (not the `-p` of the command it runs), a registry login's and mongosh's
    /// `-p …`, the MySQL clients' `-p…` when attached (`-p` alone asks for it),
    /// redis-cli's `-a …`, curl's cookies (`-b …`, `--cookie …`), `gh secret set`'s `--body …` and `-b …`, and keytool's and
    /// jarsigner's `-storepass …` and `-keypass …` (also `-srcstorepass …`).
    password_flag: Regex,
    /// A password SQL sets in a statement that creates or alters a user, role, login,
    /// database link or foreign server, or grants: `CREATE USER … WITH PASSWORD '…'`, `ALTER
    /// ROLE … PASSWORD '…'` (quoted only), `IDENTIFIED [WITH plugin] BY [PASSWORD] …` (MySQL,
    /// Oracle), and `SET PASSWORD FOR … = '…'`; prose and code that say "password" or
    /// "identified by" elsewhere keep their words. Also the secret key typed at `aws
    /// configure`'s prompt.
    sql_password: Regex,
    /// A row of a table of names and values, aligned by blanks, one value per row (`vault kv
    /// get`, `vault token create`); the caller reads it only under such a table's header,
    /// and judges the name.
    table_row: Regex,
    /// An XML element and its text or CDATA (`<password>…</password>`, Maven's settings);
    /// the caller checks that the closing tag is the opening one's.
    element: Regex,
    /// A setting given as attributes (`<add key="ClearTextPassword" value="…" />`, NuGet's
    /// and .NET's), over several lines if a formatter wrapped them.
    setting: Regex,
    /// The key of a setting's `name` or `value` field, or of a field that says its value is
    /// a secret (`keyName`, `sensitive`), in any case (AWS prints `Name` and `Value`), maybe
    /// quoted, also with its quotes escaped (JSON inside a string): a
    /// Kubernetes container's environment, Terraform's `set` blocks, JSON printed as text,
    /// compact or indented (`kubectl get -o json`, `aws ssm get-parameter`). See
    /// [`settings`].
    setting_key: Regex,
    /// A `value` field's key and separator, at the start of the text.
    value_key: Regex,
    /// A field of a setting at the start of the text: its key, maybe quoted, and a value on
    /// its line (quoted, bare words, `{}` or `[]`), and what separates it from the next: a
    /// comma, on the same line or ending it (JSON printed with indentation), or a line break,
    /// maybe after a comment and before blank and comment lines and a list item's dash;
    /// nothing after the last.
    field: Regex,
    /// A call whose first argument is a quoted name and whose second starts with a quote:
    /// `define('DB_PASSWORD', '…')`, `os.Setenv("TOKEN", "…")`.
    call: Regex,
}

static PATTERNS: LazyLock<Option<Patterns>> = LazyLock::new(|| {
    let compile = |pattern: &str| Regex::new(pattern).ok();
    Some(Patterns {
        named: compile(
            // The quote a name may close can be escaped: JSON inside a string, a command
            // line or source code (`"{\"password\": …}"`).
            r#"[A-Za-z][A-Za-z0-9_.-]*(?:\\*["']\]?)?[ \t]*(?:=>|:=|\|\|=|\?=|[=:])[ \t]*"#,
        )?,
        url_password: compile(
            // A password with `/`, `?` or `#` (which a URL should escape) runs to the first
            // `@` only, so that a path's or a query's `@` is not taken for its end.
            r#"[A-Za-z][A-Za-z0-9+.-]*:(?://|\\/\\/)[^\s/?#@:\\\[]*:(?:([^\s/?#"'<>\\]+)|([^\s"'<>\\@]+))@"#,
        )?,
        curl_user: compile(r#"(?:^|[ \t])(?:-u|--user)[ =]*["']?[^\s:\["']+:([^\s/"'][^\s"']*)"#)?,
        user_password: compile(concat!(
            r#"(?:^|[\s"'=(])[A-Za-z0-9_.-]+:([^\s@"'/]+)@(?:tcp|unix)\("#,
            r"|\bsqlplus[ \t]+(?:-[A-Za-z]+[ \t]+)*[^\s/@]+/([^\s@]+)@",
            r"|\bjdbc:oracle:[a-z]+:[^\s/:@]+/([^\s@]+)@",
        ))?,
        spaced: compile(
            r"(?m)^[ \t]*(?:(?:machine|default|login|account)[ \t][^\n]*?[ \t])?password[ \t]+([^\s:=-]\S*)",
        )?,
        flag: compile(r"(?:^|[ \t])--([A-Za-z][A-Za-z0-9_-]*) ([^\s:=|-]\S*)")?,
        config_set: compile(concat!(
            r"(?m)(?:\b(?:config(?:ure)?[ \t]+set|(?:git|poetry)[ \t]+config|(?:user-)?secrets[ \t]+set|env:set)",
            r"(?:[ \t]+--?[A-Za-z][A-Za-z-]*)*[ \t]+([^\s=-][^\s=]*)",
            // An environment's variable (in capitals) set by name and value: Windows'
            // `setx`, fish's `set -gx`, csh's `setenv`, a Dockerfile's `ENV`.
            r"|(?:\b(?:setx|set[ \t]+-[gxUlu]+|setenv)|^[ \t]*ENV)(?:[ \t]+/[Mm])?[ \t]+([A-Z_][A-Z0-9_]*))",
            r"[ \t]+([^\s-]\S*)",
        ))?,
        password_flag: compile(concat!(
            r"\bsshpass(?:[ \t]+(?:-[fdP][ \t]*[^\s-]\S*|-[ev]\S*))*[ \t]+-p[ \t]*([^\s-])",
            r"|\b(?:(?:docker|podman|buildah|nerdctl|oc|az)[ \t]+login|helm[ \t]+registry[ \t]+login|mongosh|mongo)\b[^\n|;&,]*?[ \t]-p[ \t]*([^\s-])",
            r"|\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|mariadb-dump)\b[^\n|;&,]*?[ \t]-p([^\s-])",
            r"|\bredis-cli\b[^\n|;&,]*?[ \t]-a[ \t]*([^\s-])",
            r"|\bcurl\b[^\n|;&]*?[ \t](?:-b|--cookie)[ \t=]*([^\s-])",
            r"|\bgh[ \t]+secret[ \t]+set\b[^\n|;&]*?[ \t](?:--body|-b)[ \t=]*([^\s-])",
            r"|(?:^|[ \t])-(?:src|dest|new)?(?:store|key)pass[ \t]+([^\s-])",
            r"|\bredis-server\b[^\n|;&]*?[ \t]--(?:requirepass|masterauth)[ \t]+([^\s-])",
            r"|\bsqlcmd\b[^\n|;&]*?[ \t]-P[ \t]*([^\s-])",
            r"|\bldap[a-z]+\b[^\n|;&]*?[ \t]-w[ \t]*([^\s-])",
            r"|\bcargo[ \t]+login[ \t]+([A-Za-z0-9_]{16})",
            r"|\bngrok[ \t]+(?:config[ \t]+)?add-authtoken[ \t]+([A-Za-z0-9_]{16})",
            r"|\bConvertTo-SecureString[ \t]+(?:-String[ \t]+)?([\x22'])",
            // MySQL's first start: `A temporary password is generated for root@localhost: …`.
            r"|\bpassword is generated for \S+:[ \t]*(\S)",
        ))?,
        sql_password: compile(concat!(
            // In the statement that creates or alters a user, role, login, database link or
            // foreign server (or grants one), within a bounded reach of its start and over
            // lines, so that a text of many is read in linear time. ASCII classes and word
            // boundaries keep the pattern small enough for the regex crate's fast engine.
            r"(?i)(?-u:\b)(?:(?:create|alter)(?:[ \t]+public)?[ \t]+(?:user|role|login|database[ \t]+link|server)|grant)(?-u:\b)",
            r"[\x00-\x3A\x3C-\x7F]{0,300}?[ \t\r\n]",
            r#"(?:password[ \t\r\n]+(['"])|identified(?:[ \t\r\n]+with[ \t\r\n]+[A-Za-z0-9_]+)?[ \t\r\n]+by[ \t\r\n]+(?:password[ \t\r\n]+)?([^\s;]))"#,
            r#"|(?i)(?-u:\b)set[ \t]+password(?-u:\b)[^=\n;]*=[ \t]*(?:password[ \t]*\([ \t]*)?(['"])"#,
            // `aws configure`'s prompt, answered.
            r"|(?m)^AWS Secret Access Key \[[^\]\n]*\]:[ \t]*([^\s])",
        ))?,
        table_row: compile(r"(?m)^[ \t]*([A-Za-z][A-Za-z0-9_.-]*)[ \t]{2,}([^\s:=]\S*)[ \t]*\r?$")?,
        element: compile(
            r"<([A-Za-z][A-Za-z0-9_.:-]*)(?:\s[^<>]*)?>(?:<!\[CDATA\[([^\]]*)\]\]>|([^<]*))</([A-Za-z][A-Za-z0-9_.:-]*)\s*>",
        )?,
        setting: compile(
            r#"\b(?:key|name)\s*=\s*(?:"([^"<>]*)"|'([^'<>]*)')\s+value\s*=\s*(?:"([^"]*)"|'([^']*)')"#,
        )?,
        setting_key: compile(r#"\b(?i:name|value|keyname|sensitive)(?:\\*["'])?[ \t]*[:=]"#)?,
        value_key: compile(r#"\A(?:\\*["'])?(?i:value)(?:\\*["'])?[ \t]*[:=][ \t]*"#)?,
        field: compile(concat!(
            r#"\A(?:\\*["'])?([A-Za-z][A-Za-z0-9_]*)(?:\\*["'])?[ \t]*[:=][ \t]*"#,
            // A quoted value, its quotes escaped as the key's may be; bare words (YAML's
            // `description: Database password`).
            r#"("(?:[^"\\\n]|\\.)*"|\\+"[^"\n]*?\\+"|'(?:[^'\\\n]|\\.)*'|\{\}|\[\]"#,
            r#"|[^\s,"'{}\[\]\\]+(?:[ \t]+[^\s,"'{}\[\]\\#]+)*)"#,
            // A comma, or the line's end after a comment, blank and comment lines, and a
            // list item's dash.
            r"[ \t]*(?:,[ \t]*(?:\r?\n[ \t]*)?|(?:#[^\n]*)?(?:\r?\n[ \t]*(?:#[^\n]*)?)+[ \t-]*)?",
        ))?,
        call: compile(
            r#"\(\s*(?:"([A-Za-z][A-Za-z0-9_.-]*)"|'([A-Za-z][A-Za-z0-9_.-]*)')\s*,\s*["']"#,
        )?,
    })
});
