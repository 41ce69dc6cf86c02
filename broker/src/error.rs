//! Kafka error codes, and the one error type handlers carry to the place that writes them into
//! a response. Every failure a client can see is chosen here.

use crate::log::batch::BatchError;
use crate::log::LogError;

macro_rules! error_codes {
    ($($name:ident = $value:literal,)*) => {
        /// The Kafka error codes Strata answers with (values from the Kafka protocol).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(i16)]
        pub enum ErrorCode {
            $($name = $value,)*
        }

        impl ErrorCode {
            /// The code a peer sent (another broker's answer); UNKNOWN_SERVER_ERROR for one
            /// Strata does not know.
            pub fn from_code(code: i16) -> ErrorCode {
                match code {
                    $($value => ErrorCode::$name,)*
                    _ => ErrorCode::UnknownServerError,
                }
            }
        }
    };
}

error_codes! {
    None = 0,
    OffsetOutOfRange = 1,
    CorruptMessage = 2,
    UnknownTopicOrPartition = 3,
    LeaderNotAvailable = 5,
    NotLeaderOrFollower = 6,
    RequestTimedOut = 7,
    NotEnoughReplicas = 19,
    NotEnoughReplicasAfterAppend = 20,
    MessageTooLarge = 10,
    NotController = 41,
    InvalidTopicException = 17,
    RecordListTooLarge = 18,
    InvalidRequiredAcks = 21,
    UnsupportedVersion = 35,
    UnsupportedCompressionType = 76,
    ThrottlingQuotaExceeded = 89,
    UnknownSubscriptionId = 117,
    TelemetryTooLarge = 118,
    TopicAlreadyExists = 36,
    InvalidPartitions = 37,
    InvalidReplicationFactor = 38,
    InvalidReplicaAssignment = 39,
    InvalidConfig = 40,
    InvalidRequest = 42,
    UnsupportedForMessageFormat = 43,
    PolicyViolation = 44,
    OutOfOrderSequenceNumber = 45,
    InvalidProducerEpoch = 47,
    InvalidTxnState = 48,
    TransactionCoordinatorFenced = 52,
    KafkaStorageError = 56,
    LogDirNotFound = 57,
    ReplicaNotAvailable = 9,
    ReassignmentInProgress = 60,
    DelegationTokenAuthDisabled = 61,
    DelegationTokenRequestNotAllowed = 64,
    FetchSessionIdNotFound = 70,
    InvalidFetchSessionEpoch = 71,
    FencedLeaderEpoch = 74,
    OffsetNotAvailable = 78,
    FetchSessionTopicIdError = 106,
    PreferredLeaderNotAvailable = 80,
    EligibleLeadersNotAvailable = 83,
    ElectionNotNeeded = 84,
    NoReassignmentInProgress = 85,
    UnknownLeaderEpoch = 75,
    StaleBrokerEpoch = 77,
    InvalidUpdateVersion = 95,
    InconsistentClusterId = 104,
    DuplicateVoter = 126,
    VoterNotFound = 127,
    BrokerIdNotRegistered = 102,
    UnknownServerError = -1,
    InvalidRecord = 87,
    UnstableOffsetCommit = 88,
    UnknownTopicId = 100,
    TransactionalIdNotFound = 105,
    OffsetMetadataTooLarge = 12,
    CoordinatorLoadInProgress = 14,
    CoordinatorNotAvailable = 15,
    NotCoordinator = 16,
    IllegalGeneration = 22,
    InconsistentGroupProtocol = 23,
    FencedMemberEpoch = 110,
    UnreleasedInstanceId = 111,
    UnsupportedAssignor = 112,
    StaleMemberEpoch = 113,
    InvalidRegularExpression = 128,
    InvalidRecordState = 121,
    ShareSessionNotFound = 122,
    InvalidShareSessionEpoch = 123,
    FencedStateEpoch = 124,
    ShareSessionLimitReached = 133,
    InvalidGroupId = 24,
    UnknownMemberId = 25,
    InvalidSessionTimeout = 26,
    RebalanceInProgress = 27,
    InvalidCommitOffsetSize = 28,
    NonEmptyGroup = 68,
    GroupIdNotFound = 69,
    MemberIdRequired = 79,
    FencedInstanceId = 82,
    GroupSubscribedToTopic = 86,
    InvalidProducerIdMapping = 49,
    InvalidTransactionTimeout = 50,
    ConcurrentTransactions = 51,
    OperationNotAttempted = 55,
    UnknownProducerId = 59,
    ProducerFenced = 90,
    TopicAuthorizationFailed = 29,
    GroupAuthorizationFailed = 30,
    ClusterAuthorizationFailed = 31,
    UnsupportedSaslMechanism = 33,
    IllegalSaslState = 34,
    TransactionalIdAuthorizationFailed = 53,
    SecurityDisabled = 54,
    SaslAuthenticationFailed = 58,
    ListenerNotFound = 72,
    ResourceNotFound = 91,
    DuplicateResource = 92,
    UnacceptableCredential = 93,
}

impl ErrorCode {
    pub fn code(self) -> i16 {
        self as i16
    }
}

/// An error for one topic, partition or resource of a response.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// The records of a produce refused because of them (KIP-467): index and why.
    pub record_errors: Vec<(i32, String)>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            record_errors: Vec::new(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl From<crate::share::partition::AckError> for ApiError {
    fn from(e: crate::share::partition::AckError) -> ApiError {
        use crate::share::partition::AckError;
        match e {
            AckError::InvalidRequest(m) => ApiError::new(ErrorCode::InvalidRequest, m),
            AckError::InvalidRecordState(m) => ApiError::new(ErrorCode::InvalidRecordState, m),
        }
    }
}

impl From<BatchError> for ApiError {
    fn from(e: BatchError) -> ApiError {
        let code = match e {
            BatchError::CorruptCrc { .. } | BatchError::Truncated(_) => ErrorCode::CorruptMessage,
            BatchError::UnsupportedMagic(_) => ErrorCode::UnsupportedForMessageFormat,
            BatchError::Invalid(_) => ErrorCode::InvalidRecord,
            BatchError::TooLarge { .. } => ErrorCode::MessageTooLarge,
            BatchError::RecordsRejected(_) => ErrorCode::InvalidRecord,
        };
        let message = e.to_string();
        ApiError {
            code,
            message,
            record_errors: match e {
                BatchError::RecordsRejected(records) => records,
                _ => Vec::new(),
            },
        }
    }
}

impl From<LogError> for ApiError {
    fn from(e: LogError) -> ApiError {
        let code = match &e {
            LogError::Io(_) | LogError::Corrupt(_) => ErrorCode::KafkaStorageError,
            LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            LogError::Batch(b) => return ApiError::from(b.clone()),
            LogError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequenceNumber,
            LogError::ProducerFenced { .. } => ErrorCode::InvalidProducerEpoch,
            LogError::InvalidTxnState { .. } => ErrorCode::InvalidTxnState,
            LogError::CoordinatorFenced { .. } => ErrorCode::TransactionCoordinatorFenced,
            LogError::PolicyViolation(_) => ErrorCode::PolicyViolation,
        };
        if code == ErrorCode::KafkaStorageError {
            tracing::error!(error = %e, "storage error");
        }
        ApiError::new(code, e.to_string())
    }
}
