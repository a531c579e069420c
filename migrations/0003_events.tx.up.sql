-- Outbound events (the transactional outbox of SPEC "Events") and durable
-- operator alerts.

-- One row per event. The row is written in the transaction of the state
-- change it reports, together with its first delivery job, so a rolled-back
-- change leaves neither. id is the raw_id; the id receivers see is
-- 'evt_' followed by its 32 hex digits. payload is json (not jsonb) because
-- it holds the exact bytes that are signed and sent, unchanged across
-- retries.
CREATE TABLE outbound_events (
    id              uuid PRIMARY KEY,
    type            text NOT NULL CHECK (type IN (
                        'deposit.detected', 'deposit.settled', 'deposit.review_required', 'deposit.expired',
                        'withdrawal.pending_approval', 'withdrawal.broadcast', 'withdrawal.completed', 'withdrawal.failed')),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    -- failed or successful POSTs in the current delivery cycle; ten failures make it dead
    attempts        int NOT NULL DEFAULT 0 CHECK (attempts BETWEEN 0 AND 10),
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    payload         json NOT NULL,
    created_at      timestamptz NOT NULL,
    delivered_at    timestamptz,
    dead_at         timestamptz,
    redeliveries    int NOT NULL DEFAULT 0 CHECK (redeliveries >= 0),
    -- the delivery attempt in progress: set when a worker claims the event
    -- before POSTing, so two workers never send the same attempt
    claim_token     uuid,
    claimed_until   timestamptz,
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL)),
    CHECK ((status = 'dead') = (dead_at IS NOT NULL)),
    CHECK (status <> 'dead' OR attempts = 10),
    CHECK ((claim_token IS NULL) = (claimed_until IS NULL))
);
CREATE INDEX outbound_events_created ON outbound_events (created_at DESC, id DESC);
CREATE INDEX outbound_events_status_created ON outbound_events (status, created_at DESC, id DESC);
CREATE INDEX outbound_events_due ON outbound_events (next_attempt_at, id) WHERE status = 'pending';

-- Events are never deleted, and what was sent never changes.
CREATE FUNCTION outbound_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'outbound events are never deleted (event %)', OLD.id;
    END IF;
    IF NEW.id <> OLD.id OR NEW.type <> OLD.type OR NEW.created_at <> OLD.created_at
       OR NEW.payload::text <> OLD.payload::text THEN
        RAISE EXCEPTION 'the id, type, created_at and payload of an outbound event never change (event %)', OLD.id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER outbound_events_guard BEFORE UPDATE OR DELETE ON outbound_events
    FOR EACH ROW EXECUTE FUNCTION outbound_events_guard();

-- Operator alerts: something an operator must look at (an event that went
-- dead, a Lightning hold that needs an attestation, low gas, insolvency).
-- One alert per (type, subject), ever: raising it again is a no-op, so a
-- job that re-detects the same condition does not pile up duplicates.
CREATE TABLE operator_alerts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    type            text NOT NULL CHECK (type ~ '^[a-z][a-z0-9_.]{0,99}$'),
    subject         text NOT NULL CHECK (length(subject) BETWEEN 1 AND 500),
    detail          text NOT NULL CHECK (length(detail) <= 4000),
    created_at      timestamptz NOT NULL,
    acknowledged_at timestamptz,
    acknowledged_by text CHECK (length(acknowledged_by) BETWEEN 1 AND 200),
    UNIQUE (type, subject),
    CHECK (acknowledged_by IS NULL OR acknowledged_at IS NOT NULL)
);
CREATE INDEX operator_alerts_open ON operator_alerts (created_at DESC) WHERE acknowledged_at IS NULL;
