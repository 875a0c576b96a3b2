CREATE TABLE `locks` (
  `name` STRING(1024) NOT NULL,
  `token` INT64 NOT NULL DEFAULT (1),
  `holder_id` STRING(1024),
  `session_id` STRING(64),
  `ttl_ms` INT64,
  `acquired_at` TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  `renewed_at` TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  `payload` BYTES(MAX),
  `kind` STRING(16),
  `permits` INT64,
  `completed_at` TIMESTAMP OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (`name`);
CREATE TABLE `locks_sessions` (
  `session_id` STRING(64) NOT NULL,
  `holder_id` STRING(1024),
  `ttl_ms` INT64 NOT NULL,
  `renewed_at` TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  `high_water` TIMESTAMP,
) PRIMARY KEY (`session_id`),
  ROW DELETION POLICY (OLDER_THAN(renewed_at, INTERVAL 2 DAY));
CREATE TABLE `locks_permits` (
  `name` STRING(1024) NOT NULL,
  `slot` INT64 NOT NULL,
  `token` INT64 NOT NULL,
  `holder_id` STRING(1024),
  `session_id` STRING(64),
  `ttl_ms` INT64,
  `acquired_at` TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  `renewed_at` TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  `payload` BYTES(MAX),
  `high_water` TIMESTAMP,
) PRIMARY KEY (`name`, `slot`),
  INTERLEAVE IN PARENT `locks` ON DELETE CASCADE;
