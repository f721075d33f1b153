//! [`Secret`]: a password, key or token that never prints. Its `Debug` and `Display` write
//! `[hidden]`, so a secret inside a config struct, an error or a log field cannot leak; code that
//! needs the value asks for it by name ([`Secret::expose`]).

use std::fmt;

#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself: only for the code that checks or sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?} {:?}", Some(&s)), "[hidden] [hidden] Some([hidden])");
        assert_eq!(s.expose(), "hunter2");
    }
}
