//! Principals: who a connection is, as Kafka's `KafkaPrincipal` (`User:<name>`), and Kafka's
//! `ssl.principal.mapping.rules` from a certificate subject to a user name.

use std::fmt;

/// Kafka's `KafkaPrincipal` of type `User`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    pub name: String,
}

impl Principal {
    /// Kafka's `User:ANONYMOUS`: a PLAINTEXT connection, or SSL without a client certificate.
    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }

    pub fn user(name: impl Into<String>) -> Principal {
        Principal { name: name.into() }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User:{}", self.name)
    }
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Rule { pattern: regex::Regex, replacement: String, case: Option<char> },
}

/// `ssl.principal.mapping.rules`, parsed.
#[derive(Debug, Clone)]
pub struct PrincipalRules(Vec<Rule>);

impl PrincipalRules {
    /// Parses Kafka's syntax: `DEFAULT` and `RULE:pattern/replacement/[LU]`, comma-separated (a
    /// pattern may itself hold commas and escaped slashes).
    pub fn parse(text: &str) -> Result<PrincipalRules, String> {
        let mut rules = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = r;
            } else if let Some(r) = rest.strip_prefix("RULE:") {
                let (pattern, r) =
                    until_slash(r).ok_or_else(|| format!("{rest}: expected RULE:pattern/replacement/"))?;
                let (replacement, r) =
                    until_slash(r).ok_or_else(|| format!("{rest}: expected RULE:pattern/replacement/"))?;
                let (case, r) = match r.chars().next() {
                    Some(c @ ('L' | 'U')) => (Some(c), &r[1..]),
                    _ => (None, r),
                };
                let pattern =
                    regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("pattern {pattern:?}: {e}"))?;
                rules.push(Rule::Rule { pattern, replacement: java_replacement(&replacement), case });
                rest = r;
            } else {
                return Err(format!("{rest}: expected DEFAULT or RULE:pattern/replacement/[LU]"));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(r) => rest = r.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("{rest}: expected ',' between rules")),
            }
        }
        if rules.is_empty() {
            return Err("no rule".into());
        }
        Ok(PrincipalRules(rules))
    }

    /// The user name for a certificate subject: the first rule that matches; the subject itself
    /// if none does (as Kafka, which falls back to the distinguished name).
    pub fn apply(&self, subject: &str) -> String {
        for rule in &self.0 {
            match rule {
                Rule::Default => return subject.to_string(),
                Rule::Rule { pattern, replacement, case } if pattern.is_match(subject) => {
                    let out = pattern.replace(subject, replacement.as_str()).into_owned();
                    return match case {
                        Some('L') => out.to_lowercase(),
                        Some('U') => out.to_uppercase(),
                        _ => out,
                    };
                }
                Rule::Rule { .. } => {}
            }
        }
        subject.to_string()
    }
}

/// Text up to the next unescaped '/', with `\/` unescaped, and the text after the slash.
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, n)) => {
                    out.push('\\');
                    out.push(n);
                }
                None => return None,
            },
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// Java's `$1` group references as Rust's `${1}` (Rust would read `$1abc` as a group name).
fn java_replacement(r: &str) -> String {
    let mut out = String::with_capacity(r.len());
    let mut chars = r.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    if n == '$' {
                        out.push_str("$$");
                    } else {
                        out.push(n);
                    }
                }
            }
            '$' if chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut n = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    n.push(d);
                    chars.next();
                }
                out.push_str(&format!("${{{n}}}"));
            }
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kafka_documentation_examples() {
        let rules = PrincipalRules::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT",
        )
        .unwrap();
        assert_eq!(rules.apply("CN=kafka-server1,OU=ServiceUsers,O=Org"), "kafka-server1");
        assert_eq!(rules.apply("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US"), "duke@javasoft");
        assert_eq!(rules.apply("OU=x,cn=Bob.Smith,O=y"), "bob.smith");
        assert_eq!(rules.apply("O=only"), "O=only");
        assert_eq!(PrincipalRules::parse("DEFAULT").unwrap().apply("CN=a,O=b"), "CN=a,O=b");
        assert_eq!(PrincipalRules::parse("RULE:^CN=([^,]*)(,.*)?$/$1x/U").unwrap().apply("CN=a,O=b"), "AX");
    }

    #[test]
    fn bad_rules_are_refused() {
        for bad in ["", "RULE:abc", "RULE:a/b", "RULE:(/x/", "DEFAULT DEFAULT", "NOPE"] {
            assert!(PrincipalRules::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn principals_print_as_kafka() {
        assert_eq!(Principal::anonymous().to_string(), "User:ANONYMOUS");
    }
}
