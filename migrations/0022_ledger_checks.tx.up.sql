-- The ledger checks that ran, for the incremental check (modules/ledger,
-- check_incremental.go).
--
-- A check reads one repeatable-read snapshot and records, beside what it
-- found, its boundary xid_to: the xmin of that snapshot. Every transaction
-- below it had ended when the snapshot was taken, so every entry whose
-- created_xact is below xid_to was visible to the check, and no entry
-- committed later can have a created_xact below it (the rule that seals
-- checkpoints, 0017). The next incremental check continues from the
-- boundary of the latest consistent check: it reads the entries with
-- created_xact >= xid_to (through ledger_entries_xact), their postings,
-- and every account's balance, instead of every posting. A check that
-- found something is recorded too, with consistent false, and is never
-- continued from: the next check covers its range again.
--
-- last_posting is the largest posting id the check's snapshot held: a
-- posting above it that belongs to an entry below the boundary, or to no
-- entry, was written around the triggers after that check.
CREATE TABLE ledger_checks (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    checked_at   timestamptz NOT NULL,
    -- full: every entry and posting; incremental: those of transactions
    -- from xid_from on, and every account.
    scope        text NOT NULL CHECK (scope IN ('full', 'incremental')),
    -- the consistent check this one continued (incremental only)
    since_check  bigint REFERENCES ledger_checks (id),
    xid_from     xid8,
    xid_to       xid8 NOT NULL,
    last_posting bigint NOT NULL CHECK (last_posting >= 0),
    consistent   boolean NOT NULL,
    -- what it read and found, for the record
    accounts     bigint NOT NULL CHECK (accounts >= 0),
    entries      bigint NOT NULL CHECK (entries >= 0),
    postings     bigint NOT NULL CHECK (postings >= 0),
    findings     bigint NOT NULL CHECK (findings >= 0),
    took_ms      bigint NOT NULL CHECK (took_ms >= 0),
    CONSTRAINT ledger_checks_scope CHECK ((scope = 'full') = (xid_from IS NULL AND since_check IS NULL)),
    CONSTRAINT ledger_checks_range CHECK (xid_from IS NULL OR xid_from <= xid_to),
    CONSTRAINT ledger_checks_consistent CHECK (consistent = (findings = 0))
);

-- The boundary the next incremental check continues from.
CREATE INDEX ledger_checks_boundary ON ledger_checks (xid_to DESC, id DESC) WHERE consistent;

-- Append-only, as the ledger and its checkpoints: svc migrate grants the
-- runtime role SELECT and INSERT only, and a recorded check cannot be
-- turned consistent afterwards.
CREATE TRIGGER ledger_checks_append_only BEFORE UPDATE OR DELETE ON ledger_checks
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_checks_no_truncate BEFORE TRUNCATE ON ledger_checks
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
