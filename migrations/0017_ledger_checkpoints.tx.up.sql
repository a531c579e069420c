-- Tamper-evident checkpoints of the ledger (docs/checkpoints.md).
--
-- A checkpoint seals the entries whose writing transaction id
-- (ledger_entries.created_xact, set by its default since 0002) lies in
-- [xid_from, xid_to), where xid_to is the xmin of the snapshot the
-- checkpoint read them on and xid_from the previous checkpoint's xid_to.
-- Every transaction below a snapshot's xmin had ended when the snapshot
-- was taken, and transaction ids only grow, so no transaction that commits
-- later can have an id below xid_to: an entry committed after a checkpoint
-- never belongs to its range or an earlier one. The ranges follow each
-- other without gap or overlap, so every entry is sealed exactly once.
--
-- Nothing here runs on the write path but one index entry per ledger
-- entry: the checkpoint job reads a range in its order (created_xact, id)
-- through it. Writers take no lock and compute no hash.
CREATE INDEX ledger_entries_xact ON ledger_entries (created_xact, id);

CREATE TABLE ledger_checkpoints (
    seq         bigint PRIMARY KEY CHECK (seq >= 1),
    xid_from    xid8 NOT NULL,
    xid_to      xid8 NOT NULL,
    entry_count bigint NOT NULL CHECK (entry_count >= 1),
    root        bytea NOT NULL CHECK (octet_length(root) = 32),
    prev_hash   bytea NOT NULL CHECK (octet_length(prev_hash) = 32),
    hash        bytea NOT NULL UNIQUE CHECK (octet_length(hash) = 32),
    -- Ed25519 over hash, with LEDGER_CHECKPOINT_SIGNING_KEY; NULL unsigned.
    signature   bytea CHECK (octet_length(signature) = 64),
    created_at  timestamptz NOT NULL,
    CONSTRAINT ledger_checkpoints_range CHECK (xid_from < xid_to),
    -- The range of one checkpoint starts where the previous one's ends:
    -- two checkpoints can never seal one range.
    CONSTRAINT ledger_checkpoints_from UNIQUE (xid_from)
);

-- The leaf of every sealed entry, at its position in its checkpoint's
-- tree: verify names the entry that no longer matches, and export gives
-- each entry its proof. Written by the checkpoint, never by a writer of
-- the ledger. An entry is sealed once.
CREATE TABLE ledger_checkpoint_leaves (
    seq      bigint NOT NULL REFERENCES ledger_checkpoints (seq),
    position int NOT NULL CHECK (position >= 0),
    entry_id bigint NOT NULL,
    leaf     bytea NOT NULL CHECK (octet_length(leaf) = 32),
    PRIMARY KEY (seq, position),
    CONSTRAINT ledger_checkpoint_leaves_entry UNIQUE (entry_id)
);

-- Append-only, as the ledger (0002's guard): svc migrate grants the
-- runtime role SELECT and INSERT only on tables with an *_append_only
-- trigger.
CREATE TRIGGER ledger_checkpoints_append_only BEFORE UPDATE OR DELETE ON ledger_checkpoints
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_checkpoints_no_truncate BEFORE TRUNCATE ON ledger_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_checkpoint_leaves_append_only BEFORE UPDATE OR DELETE ON ledger_checkpoint_leaves
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_checkpoint_leaves_no_truncate BEFORE TRUNCATE ON ledger_checkpoint_leaves
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
