-- The sealed leaves of the ledger's checkpoints in blocks (docs/checkpoints.md).
--
-- Migration 0017 stored one row per sealed entry (seq, position, entry_id,
-- leaf): about 100 bytes and two index entries per entry, inserted 5,000
-- rows at a time, a large share of a checkpoint's time. The same facts
-- are now stored 1,024 positions to a row: block b of checkpoint seq holds
-- positions 1024*b to 1024*b + 1023 (the last block fewer), as the
-- entries' ids (8 bytes each, big-endian) and their leaf hashes (32 bytes
-- each), in position order. Nothing of the encodings, the tree or the
-- checkpoint's hash changes.
--
-- What 0017's unique entry_id also enforced, that an entry is sealed once,
-- follows from the ranges: each starts where the previous one ended
-- (ledger_checkpoints_from), and an entry belongs to the one range that
-- holds its transaction id. svc admin ledger verify checks every sealed
-- id against the range read back.
CREATE TABLE ledger_checkpoint_blocks (
    seq       bigint NOT NULL REFERENCES ledger_checkpoints (seq),
    block     integer NOT NULL CHECK (block >= 0),
    entry_ids bytea NOT NULL CHECK (octet_length(entry_ids) BETWEEN 8 AND 8 * 1024 AND octet_length(entry_ids) % 8 = 0),
    leaves    bytea NOT NULL,
    PRIMARY KEY (seq, block),
    CONSTRAINT ledger_checkpoint_blocks_leaves CHECK (octet_length(leaves) = 4 * octet_length(entry_ids))
);

-- Hashes do not compress, and ids are cheaper stored than compressed: out
-- of line as they are.
ALTER TABLE ledger_checkpoint_blocks ALTER COLUMN entry_ids SET STORAGE EXTERNAL;
ALTER TABLE ledger_checkpoint_blocks ALTER COLUMN leaves SET STORAGE EXTERNAL;

-- Append-only, as the ledger and ledger_checkpoints: svc migrate grants
-- the runtime role SELECT and INSERT only.
CREATE TRIGGER ledger_checkpoint_blocks_append_only BEFORE UPDATE OR DELETE ON ledger_checkpoint_blocks
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_checkpoint_blocks_no_truncate BEFORE TRUNCATE ON ledger_checkpoint_blocks
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- The leaves sealed so far, moved as they are.
INSERT INTO ledger_checkpoint_blocks (seq, block, entry_ids, leaves)
SELECT seq, position / 1024, string_agg(int8send(entry_id), ''::bytea ORDER BY position),
       string_agg(leaf, ''::bytea ORDER BY position)
  FROM ledger_checkpoint_leaves
 GROUP BY seq, position / 1024;

DROP TABLE ledger_checkpoint_leaves;

-- One row per sealed entry, as 0017's table was, for inspection and
-- queries by hand (it reads every block: not for a request path).
CREATE FUNCTION ledger_checkpoint_leaves() RETURNS TABLE (seq bigint, "position" integer, entry_id bigint, leaf bytea)
    LANGUAGE sql STABLE AS $$
SELECT b.seq, b.block * 1024 + i, ('x' || encode(substr(b.entry_ids, 8 * i + 1, 8), 'hex'))::bit(64)::bigint,
       substr(b.leaves, 32 * i + 1, 32)
  FROM ledger_checkpoint_blocks b, generate_series(0, octet_length(b.entry_ids) / 8 - 1) i
$$;
