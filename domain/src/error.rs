//! Iggy error codes that Rill puts on the wire (`status` of a reply or a result section).

/// An Iggy error code. The numeric values are the ones `IggyError` uses, because the official
/// clients map `status` back to their own error enum by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    Error = 1,
    InvalidConfiguration = 2,
    InvalidCommand = 3,
    InvalidFormat = 4,
    FeatureUnavailable = 5,
    InvalidIdentifier = 6,
    ResourceNotFound = 20,
    /// The session a request names has ended (ATTACH_CONSUMER_SESSION to a gone coordinator).
    StaleClient = 30,
    Unauthenticated = 40,
    Unauthorized = 41,
    InvalidCredentials = 42,
    InvalidUsername = 43,
    InvalidPassword = 44,
    InvalidUserStatus = 45,
    UserAlreadyExists = 46,
    UserInactive = 47,
    CannotDeleteUser = 48,
    CannotChangePermissions = 49,
    InvalidPersonalAccessTokenName = 50,
    PersonalAccessTokenAlreadyExists = 51,
    PersonalAccessTokensLimitReached = 52,
    InvalidPersonalAccessToken = 53,
    PersonalAccessTokenExpired = 54,
    /// The op was not committed in time; the same request may be retried.
    TransientNotCommitted = 57,
    /// This node cannot accept the op now (not the primary, or a view change); retry.
    TransientNotAccepted = 58,
    /// Protocol 0.12: the partition's history is not the one the request was routed to
    /// (a stale incarnation); the client reads the route again.
    HistoryUnavailable = 87,
    /// Protocol 0.12: this node is not the partition's primary.
    NotPrimary = 89,
    /// Protocol 0.12: the shard already holds as many waiting polls as it allows.
    DeferredPollCapacityExceeded = 90,
    ProducerSequenceOutOfOrder = 92,
    ProducerEpochFenced = 93,
    /// A producer the partition has not seen, starting past sequence 0.
    ProducerUnknown = 94,
    /// A producer batch without an explicit partition.
    ProducerPartitionRequired = 95,
    InvalidEncryptionKey = 70,
    CannotEncryptData = 71,
    /// A stored message does not open with the configured key (or was tampered with).
    CannotDecryptData = 72,
    ClientNotFound = 100,
    StreamIdNotFound = 1009,
    StreamNameNotFound = 1010,
    StreamNameAlreadyExists = 1012,
    InvalidStreamName = 1013,
    InvalidStreamId = 1014,
    TooManyStreams = 1020,
    TopicIdNotFound = 2010,
    TopicNameNotFound = 2011,
    TopicNameAlreadyExists = 2013,
    InvalidTopicName = 2014,
    TooManyPartitions = 2015,
    InvalidTopicId = 2016,
    InvalidReplicationFactor = 2018,
    InvalidPartitionsCount = 2019,
    TooManyTopics = 2021,
    PartitionNotFound = 3007,
    NoPartitions = 3008,
    ConsumerOffsetNotFound = 3021,
    SegmentNotFound = 4000,
    /// A partition write failed (a full disk, a device error): the send is not stored.
    CannotSaveMessagesToSegment = 4006,
    InvalidMessagesCount = 4009,
    /// The data volume is below its free-space floor: sends are refused until it is freed.
    CannotAppendMessage = 4010,
    TooBigUserHeaders = 4017,
    TooBigMessagePayload = 4022,
    EmptyMessagePayload = 4024,
    /// Also a poll that starts at a stored batch failing its checksum (bit rot).
    InvalidMessageChecksum = 4027,
    InvalidMessageTimestampDelta = 4038,
    InvalidBatchChecksum = 4039,
    InvalidHeaderKind = 4040,
    UnsupportedOptionKey = 4041,
    InvalidOptionValue = 4042,
    OptionsBlockTooLarge = 4043,
    OptionNotUpdatable = 4103,
    OptionNotResettable = 4104,
    ReadOnlyOption = 4105,
    /// A stream key asked of a server that has no key of its own to wrap it with.
    StreamEncryptionUnavailable = 4106,
    UnsupportedCriticalOption = 4107,
    CannotModifyRootUser = 4108,
    ConsumerGroupIdNotFound = 5000,
    ConsumerGroupNameNotFound = 5003,
    ConsumerGroupNameAlreadyExists = 5004,
    InvalidConsumerGroupName = 5005,
    ConsumerGroupMemberNotFound = 5006,
    /// Protocol 0.12: a group member read a partition the group does not assign to it.
    ConsumerGroupPartitionNotOwned = 5009,
    IoError = 13000,
}

impl ErrorCode {
    pub fn code(self) -> u32 {
        self as u32
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} ({})", self, self.code())
    }
}

impl std::error::Error for ErrorCode {}
