CREATE TABLE "locks" (
  "name" character varying(1024) NOT NULL,
  "token" bigint NOT NULL DEFAULT (1),
  "holder_id" character varying(1024),
  "session_id" character varying(64),
  "ttl_ms" bigint,
  "acquired_at" spanner.commit_timestamp,
  "renewed_at" spanner.commit_timestamp,
  "payload" bytea,
  "kind" character varying(16),
  "permits" bigint,
  "completed_at" spanner.commit_timestamp,
  "attempts" bigint,
  "grant_id" character varying(32),
  PRIMARY KEY ("name")
);
CREATE TABLE "locks_sessions" (
  "session_id" character varying(64) NOT NULL,
  "holder_id" character varying(1024),
  "ttl_ms" bigint NOT NULL,
  "renewed_at" spanner.commit_timestamp NOT NULL,
  "high_water" timestamp with time zone,
  PRIMARY KEY ("session_id")
) TTL INTERVAL '2 days' ON "renewed_at";
CREATE TABLE "locks_permits" (
  "name" character varying(1024) NOT NULL,
  "slot" bigint NOT NULL,
  "token" bigint NOT NULL,
  "holder_id" character varying(1024),
  "session_id" character varying(64),
  "ttl_ms" bigint,
  "acquired_at" spanner.commit_timestamp,
  "renewed_at" spanner.commit_timestamp,
  "payload" bytea,
  "high_water" timestamp with time zone,
  "grant_id" character varying(32),
  PRIMARY KEY ("name", "slot")
) INTERLEAVE IN PARENT "locks" ON DELETE CASCADE;
