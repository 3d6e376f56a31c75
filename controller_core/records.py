"""Every KRaft metadata record (apiKey 0-28) and KRaft control record, declared as data.

These declarations are this project's own statement of Kafka's on-disk formats; the test
``tests/controller_core/test_schema_declarations.py`` checks them field by field and version by
version against Kafka's JSON message definitions.  Nested struct types are declared inline at the
field that uses them (Kafka's ``commonStructs`` are expanded where referenced).
"""
from __future__ import annotations

from controller_core.schema import F, RecordDef, Versions, upper_snake


def _metadata(api_key, name, valid, fields):
    return RecordDef(name=name, type_name=upper_snake(name), valid_versions=Versions.parse(valid),
                     fields=tuple(fields), api_key=api_key)


def _control(control_type, name, type_name, valid, fields):
    return RecordDef(name=name, type_name=type_name, valid_versions=Versions.parse(valid),
                     fields=tuple(fields), control_type=control_type)


METADATA_RECORDS: tuple[RecordDef, ...] = (
    _metadata(0, 'RegisterBrokerRecord', '0-4', [
        F('BrokerId', 'int32', '0+'),
        F('IsMigratingZkBroker', 'bool', '2+', default='false'),
        F('IncarnationId', 'uuid', '0+'),
        F('BrokerEpoch', 'int64', '0+'),
        F('EndPoints', '[]BrokerEndpoint', '0+', fields=[
            F('Name', 'string', '0+'),
            F('Host', 'string', '0+'),
            F('Port', 'uint16', '0+'),
            F('SecurityProtocol', 'int16', '0+'),
        ]),
        F('Features', '[]BrokerFeature', '0+', fields=[
            F('Name', 'string', '0+'),
            F('MinSupportedVersion', 'int16', '0+'),
            F('MaxSupportedVersion', 'int16', '0+'),
        ]),
        F('Rack', 'string', '0+', nullable='0+'),
        F('Fenced', 'bool', '0+', default='true'),
        F('InControlledShutdown', 'bool', '1+', default='false'),
        F('LogDirs', '[]uuid', '3+', tagged='3+', tag=0),
        # Kafka 4.3, KIP-1066 (no JSON file in ../shared: see NEWER_THAN_KAFKA_FILES)
        F('CordonedLogDirs', '[]uuid', '4+', nullable='4+', tagged='4+', tag=1, default='null'),
    ]),
    _metadata(1, 'UnregisterBrokerRecord', '0', [
        F('BrokerId', 'int32', '0+'),
        F('BrokerEpoch', 'int64', '0+'),
    ]),
    _metadata(2, 'TopicRecord', '0', [
        F('Name', 'string', '0+'),
        F('TopicId', 'uuid', '0+'),
    ]),
    _metadata(3, 'PartitionRecord', '0-2', [
        F('PartitionId', 'int32', '0+', default='-1'),
        F('TopicId', 'uuid', '0+'),
        F('Replicas', '[]int32', '0+'),
        F('Isr', '[]int32', '0+'),
        F('RemovingReplicas', '[]int32', '0+'),
        F('AddingReplicas', '[]int32', '0+'),
        F('Leader', 'int32', '0+', default='-1'),
        F('LeaderRecoveryState', 'int8', '0+', tagged='0+', tag=0, default='0'),
        F('LeaderEpoch', 'int32', '0+', default='-1'),
        F('PartitionEpoch', 'int32', '0+', default='-1'),
        F('Directories', '[]uuid', '1+'),
        F('EligibleLeaderReplicas', '[]int32', '2+', nullable='2+', tagged='2+', tag=1, default='null'),
        F('LastKnownElr', '[]int32', '2+', nullable='2+', tagged='2+', tag=2, default='null'),
    ]),
    _metadata(4, 'ConfigRecord', '0', [
        F('ResourceType', 'int8', '0+'),
        F('ResourceName', 'string', '0+'),
        F('Name', 'string', '0+'),
        F('Value', 'string', '0+', nullable='0+'),
    ]),
    _metadata(5, 'PartitionChangeRecord', '0-2', [
        F('PartitionId', 'int32', '0+', default='-1'),
        F('TopicId', 'uuid', '0+'),
        F('Isr', '[]int32', '0+', nullable='0+', tagged='0+', tag=0, default='null'),
        F('Leader', 'int32', '0+', tagged='0+', tag=1, default='-2'),
        F('Replicas', '[]int32', '0+', nullable='0+', tagged='0+', tag=2, default='null'),
        F('RemovingReplicas', '[]int32', '0+', nullable='0+', tagged='0+', tag=3, default='null'),
        F('AddingReplicas', '[]int32', '0+', nullable='0+', tagged='0+', tag=4, default='null'),
        F('LeaderRecoveryState', 'int8', '0+', tagged='0+', tag=5, default='-1'),
        F('Directories', '[]uuid', '1+', nullable='1+', tagged='1+', tag=8, default='null'),
        F('EligibleLeaderReplicas', '[]int32', '2+', nullable='2+', tagged='2+', tag=6, default='null'),
        F('LastKnownElr', '[]int32', '2+', nullable='2+', tagged='2+', tag=7, default='null'),
    ]),
    _metadata(7, 'FenceBrokerRecord', '0', [
        F('Id', 'int32', '0+'),
        F('Epoch', 'int64', '0+'),
    ]),
    _metadata(8, 'UnfenceBrokerRecord', '0', [
        F('Id', 'int32', '0+'),
        F('Epoch', 'int64', '0+'),
    ]),
    _metadata(9, 'RemoveTopicRecord', '0', [
        F('TopicId', 'uuid', '0+'),
    ]),
    _metadata(10, 'DelegationTokenRecord', '0', [
        F('Owner', 'string', '0+'),
        F('Requester', 'string', '0+'),
        F('Renewers', '[]string', '0+'),
        F('IssueTimestamp', 'int64', '0+'),
        F('MaxTimestamp', 'int64', '0+'),
        F('ExpirationTimestamp', 'int64', '0+'),
        F('TokenId', 'string', '0+'),
    ]),
    _metadata(11, 'UserScramCredentialRecord', '0', [
        F('Name', 'string', '0+'),
        F('Mechanism', 'int8', '0+'),
        F('Salt', 'bytes', '0+'),
        F('StoredKey', 'bytes', '0+'),
        F('ServerKey', 'bytes', '0+'),
        F('Iterations', 'int32', '0+'),
    ]),
    _metadata(12, 'FeatureLevelRecord', '0', [
        F('Name', 'string', '0+'),
        F('FeatureLevel', 'int16', '0+'),
    ]),
    _metadata(14, 'ClientQuotaRecord', '0', [
        F('Entity', '[]EntityData', '0+', fields=[
            F('EntityType', 'string', '0+'),
            F('EntityName', 'string', '0+', nullable='0+'),
        ]),
        F('Key', 'string', '0+'),
        F('Value', 'float64', '0+'),
        F('Remove', 'bool', '0+'),
    ]),
    _metadata(15, 'ProducerIdsRecord', '0', [
        F('BrokerId', 'int32', '0+'),
        F('BrokerEpoch', 'int64', '0+', default='-1'),
        F('NextProducerId', 'int64', '0+'),
    ]),
    _metadata(17, 'BrokerRegistrationChangeRecord', '0-3', [
        F('BrokerId', 'int32', '0+'),
        F('BrokerEpoch', 'int64', '0+'),
        F('Fenced', 'int8', '0+', tagged='0+', tag=0),
        F('InControlledShutdown', 'int8', '1+', tagged='1+', tag=1),
        F('LogDirs', '[]uuid', '2+', tagged='2+', tag=2),
        # Kafka 4.3, KIP-1066: null = no change (see NEWER_THAN_KAFKA_FILES)
        F('CordonedLogDirs', '[]uuid', '3+', nullable='3+', tagged='3+', tag=3, default='null'),
    ]),
    _metadata(18, 'AccessControlEntryRecord', '0', [
        F('Id', 'uuid', '0+'),
        F('ResourceType', 'int8', '0+'),
        F('ResourceName', 'string', '0+'),
        F('PatternType', 'int8', '0+'),
        F('Principal', 'string', '0+'),
        F('Host', 'string', '0+'),
        F('Operation', 'int8', '0+'),
        F('PermissionType', 'int8', '0+'),
    ]),
    _metadata(19, 'RemoveAccessControlEntryRecord', '0', [
        F('Id', 'uuid', '0+'),
    ]),
    _metadata(20, 'NoOpRecord', '0', []),
    _metadata(21, 'ZkMigrationStateRecord', '0', [
        F('ZkMigrationState', 'int8', '0+'),
    ]),
    _metadata(22, 'RemoveUserScramCredentialRecord', '0', [
        F('Name', 'string', '0+'),
        F('Mechanism', 'int8', '0+'),
    ]),
    _metadata(23, 'BeginTransactionRecord', '0', [
        F('Name', 'string', '0+', nullable='0+', tagged='0+', tag=0, default='null'),
    ]),
    _metadata(24, 'EndTransactionRecord', '0', []),
    _metadata(25, 'AbortTransactionRecord', '0', [
        F('Reason', 'string', '0+', nullable='0+', tagged='0+', tag=0, default='null'),
    ]),
    _metadata(26, 'RemoveDelegationTokenRecord', '0', [
        F('TokenId', 'string', '0+'),
    ]),
    _metadata(27, 'RegisterControllerRecord', '0', [
        F('ControllerId', 'int32', '0+'),
        F('IncarnationId', 'uuid', '0+'),
        F('ZkMigrationReady', 'bool', '0+'),
        F('EndPoints', '[]ControllerEndpoint', '0+', fields=[
            F('Name', 'string', '0+'),
            F('Host', 'string', '0+'),
            F('Port', 'uint16', '0+'),
            F('SecurityProtocol', 'int16', '0+'),
        ]),
        F('Features', '[]ControllerFeature', '0+', fields=[
            F('Name', 'string', '0+'),
            F('MinSupportedVersion', 'int16', '0+'),
            F('MaxSupportedVersion', 'int16', '0+'),
        ]),
    ]),
    _metadata(28, 'ClearElrRecord', '0', [
        F('TopicName', 'string', '0+'),
    ]),
    # Kafka 4.4 (metadata.version 4.4-IV2): a controller leaving the quorum's registrations
    _metadata(29, 'UnregisterControllerRecord', '0', [
        F('ControllerId', 'int32', '0+'),
    ]),
)

# Control records of the KRaft log: the key is (version int16, type int16) and the value begins with
# the message's own Version field.  Types 0/1 (ABORT/COMMIT) are transaction markers that never appear
# in __cluster_metadata.
CONTROL_RECORDS: tuple[RecordDef, ...] = (
    _control(5, 'KRaftVersionRecord', 'KRAFT_VERSION', '0', [
        F('Version', 'int16', '0+'),
        F('KRaftVersion', 'int16', '0+'),
    ]),
    _control(6, 'VotersRecord', 'KRAFT_VOTERS', '0', [
        F('Version', 'int16', '0+'),
        F('Voters', '[]Voter', '0+', fields=[
            F('VoterId', 'int32', '0+'),
            F('VoterDirectoryId', 'uuid', '0+'),
            F('Endpoints', '[]Endpoint', '0+', fields=[
                F('Name', 'string', '0+'),
                F('Host', 'string', '0+'),
                F('Port', 'uint16', '0+'),
            ]),
            F('KRaftVersionFeature', 'KRaftVersionFeature', '0+', fields=[
                F('MinSupportedVersion', 'int16', '0+'),
                F('MaxSupportedVersion', 'int16', '0+'),
            ]),
        ]),
    ]),
    _control(3, 'SnapshotHeaderRecord', 'SNAPSHOT_HEADER', '0', [
        F('Version', 'int16', '0+'),
        F('LastContainedLogTimestamp', 'int64', '0+'),
    ]),
    _control(4, 'SnapshotFooterRecord', 'SNAPSHOT_FOOTER', '0', [
        F('Version', 'int16', '0+'),
    ]),
    _control(2, 'LeaderChangeMessage', 'LEADER_CHANGE', '0-1', [
        F('Version', 'int16', '0+'),
        F('LeaderId', 'int32', '0+'),
        F('Voters', '[]Voter', '0+', fields=[
            F('VoterId', 'int32', '0+'),
            F('VoterDirectoryId', 'uuid', '1+'),
        ]),
        F('GrantingVoters', '[]Voter', '0+', fields=[
            F('VoterId', 'int32', '0+'),
            F('VoterDirectoryId', 'uuid', '1+'),
        ]),
    ]),
)

# Versions declared beyond Kafka's JSON files in ../shared/kafka-schemas (record name -> the newest version those
# files have): KIP-1066's CordonedLogDirs (Kafka 4.3), a tagged nullable uuid list, RegisterBrokerRecord v4 tag 1
# and BrokerRegistrationChangeRecord v3 tag 3.  tests/controller_core/test_schema_declarations.py checks these
# records against the files up to that version, and that the later versions only add tagged fields.
NEWER_THAN_KAFKA_FILES: dict[str, int] = {"RegisterBrokerRecord": 3, "BrokerRegistrationChangeRecord": 2}

# What a record of an apiKey / control type this build does not know becomes (README "Newer Kafka"): its type
# number and its value's bytes (after the metadata frame: frameVersion, apiKey, version; a control record's whole
# value), kept, never quarantined.  Not Kafka records: outside BY_API_KEY / BY_CONTROL_TYPE / BY_TYPE_NAME.
UNKNOWN_RECORD_TYPE = "UNKNOWN_RECORD"
UNKNOWN_METADATA = RecordDef(name="UnknownMetadataRecord", type_name=UNKNOWN_RECORD_TYPE,
                             valid_versions=Versions(0, None),
                             fields=(F('ApiKey', 'int32', '0+'), F('Value', 'bytes', '0+')))
UNKNOWN_CONTROL = RecordDef(name="UnknownControlRecord", type_name=UNKNOWN_RECORD_TYPE,
                            valid_versions=Versions(0, None),
                            fields=(F('ControlType', 'int32', '0+'), F('Value', 'bytes', '0+')))


def newest_layout(rdef: RecordDef, version: int) -> int:
    """The version whose layout a record of ``version`` is read with: its own, or for a version newer than
    any declared the newest declared one (a newer version of a flexible record only adds tagged fields,
    which the reader keeps as unknown tagged fields)."""
    hi = rdef.valid_versions.hi
    return hi if hi is not None and version > hi else version


BY_API_KEY: dict[int, RecordDef] = {r.api_key: r for r in METADATA_RECORDS}
BY_CONTROL_TYPE: dict[int, RecordDef] = {r.control_type: r for r in CONTROL_RECORDS}
BY_TYPE_NAME: dict[str, RecordDef] = {r.type_name: r for r in METADATA_RECORDS + CONTROL_RECORDS}
