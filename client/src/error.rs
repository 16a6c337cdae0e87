//! The client's error type. Every error says what the caller may do next: retry the same call
//! ([`ErrorKind::Retriable`]), abort the current transaction and carry on
//! ([`ErrorKind::Abortable`]), or drop the producer or consumer ([`ErrorKind::Fatal`], for
//! example when a newer instance with the same transactional id has fenced this one).

use crate::connection::ConnError;
use kafka_protocol::error::ResponseError;
use std::fmt;

/// What the caller may do after an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Transient: the same call may succeed if repeated (a timeout, a coordinator moving).
    Retriable,
    /// The current transaction cannot commit; abort it and begin a new one.
    Abortable,
    /// This producer or consumer can do nothing more (fenced, unauthorized, misconfigured).
    Fatal,
    /// The call was not valid in the current state (e.g. `commit_transaction` without
    /// `begin_transaction`), or its arguments were bad. Nothing was changed.
    Invalid,
}

/// An error from the Sluice client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    code: Option<ResponseError>,
    message: String,
}

/// The client's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, code: None, message: message.into() }
    }

    /// An error for a Kafka error code returned by `what`; its kind follows the protocol's
    /// retriable flag (callers reclassify for transactions).
    pub fn kafka(code: ResponseError, what: impl fmt::Display) -> Error {
        let kind = if is_fatal_code(code) {
            ErrorKind::Fatal
        } else if code.is_retriable() {
            ErrorKind::Retriable
        } else {
            ErrorKind::Invalid
        };
        Error { kind, code: Some(code), message: format!("{what}: {code}") }
    }

    /// `Some` error for a non-zero Kafka error code.
    pub fn from_code(code: i16, what: impl fmt::Display) -> Option<Error> {
        ResponseError::try_from_code(code).map(|c| Error::kafka(c, what))
    }

    /// Ok for error code 0, the error otherwise.
    pub fn check(code: i16, what: impl fmt::Display) -> Result<()> {
        match Error::from_code(code, what) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// A bad argument or a call made in the wrong state.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Invalid, message)
    }

    /// A timeout (retriable).
    pub fn timeout(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Retriable, message)
    }

    /// The same error with another kind.
    pub fn with_kind(mut self, kind: ErrorKind) -> Error {
        self.kind = kind;
        self
    }

    /// What the caller may do next.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The Kafka error code behind this error, if there is one.
    pub fn code(&self) -> Option<ResponseError> {
        self.code
    }

    /// True when repeating the call may succeed.
    pub fn is_retriable(&self) -> bool {
        self.kind == ErrorKind::Retriable
    }

    /// True when the transaction must be aborted.
    pub fn is_abortable(&self) -> bool {
        self.kind == ErrorKind::Abortable
    }

    /// True when the producer or consumer must be dropped.
    pub fn is_fatal(&self) -> bool {
        self.kind == ErrorKind::Fatal
    }

    /// True when a newer producer instance fenced this one.
    pub fn is_fenced(&self) -> bool {
        matches!(self.code, Some(ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch))
            && self.kind == ErrorKind::Fatal
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Codes after which nothing this client instance does can succeed.
fn is_fatal_code(code: ResponseError) -> bool {
    matches!(
        code,
        ResponseError::ProducerFenced
            | ResponseError::TransactionalIdAuthorizationFailed
            | ResponseError::ClusterAuthorizationFailed
            | ResponseError::UnsupportedVersion
            | ResponseError::UnsupportedForMessageFormat
            | ResponseError::FencedInstanceId
    )
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ErrorKind::Retriable => "retriable",
            ErrorKind::Abortable => "abortable",
            ErrorKind::Fatal => "fatal",
            ErrorKind::Invalid => "invalid",
        };
        write!(f, "{} ({kind})", self.message)
    }
}

impl std::error::Error for Error {}

impl From<ConnError> for Error {
    fn from(e: ConnError) -> Error {
        match e {
            ConnError::Protocol(m) => Error::new(ErrorKind::Fatal, format!("protocol: {m}")),
            other => Error::new(ErrorKind::Retriable, other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_protocol() {
        let e = Error::from_code(6, "produce").expect("error");
        assert!(e.is_retriable());
        let e = Error::from_code(90, "init").expect("error");
        assert!(e.is_fatal() && e.is_fenced());
        let e = Error::from_code(10, "produce").expect("error");
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert!(Error::from_code(0, "x").is_none());
        assert!(Error::check(0, "x").is_ok());
        assert!(Error::from(ConnError::Closed).is_retriable());
    }
}
