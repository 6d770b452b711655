use std::fmt;

/// A configuration problem, always tied to the key that causes it and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted key, e.g. `model.heads`. Empty when the problem is the file itself.
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self { key: key.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "config: {}", self.message)
        } else {
            write!(f, "config key `{}`: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Divisors of `n`, for error messages that list valid choices.
pub fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|k| n.is_multiple_of(*k)).collect()
}

/// Format a list of choices as `{1, 2, 4}`.
pub fn choices<T: fmt::Display>(items: &[T]) -> String {
    let parts: Vec<String> = items.iter().map(|x| x.to_string()).collect();
    format!("{{{}}}", parts.join(", "))
}
