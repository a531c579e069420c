-- Proof of liabilities (modules/liabilities, docs/provable-custody.md): per
-- asset, a Merkle sum tree over every user's available + held at one
-- snapshot of the ledger.
--
-- liabilities_snapshots is the published history: one row per asset and
-- snapshot, with the root and the total it commits to. Append-only like the
-- ledger (the *_append_only trigger also limits the runtime role to SELECT
-- and INSERT, platform/db.GrantRuntime).
--
-- liabilities_leaves and liabilities_nodes are the material the proof
-- endpoint answers from: the leaves' salted id hashes and the tree's nodes,
-- in blocks (a million users make about 3,000 rows, written in seconds).
-- They need no database guard: a changed row yields a proof that does not
-- verify against the published root, and the endpoint verifies every proof
-- before it serves it. They are pruned once a snapshot is old
-- (modules/liabilities.ProofRetention), the latest of each asset always
-- kept.

CREATE TABLE liabilities_snapshots (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    asset        text NOT NULL REFERENCES assets (asset),
    -- the time of the ledger snapshot the tree was built from
    taken_at     timestamptz NOT NULL,
    -- hourly (with the reconciliation) or on_demand
    trigger      text NOT NULL CHECK (trigger IN ('hourly', 'on_demand')),
    -- cli:NAME for svc admin liabilities snapshot
    requested_by text CHECK (char_length(requested_by) <= 255),
    users        bigint NOT NULL CHECK (users >= 0),
    -- the secret each user's salt is derived from (HMAC-SHA-256, keyed by
    -- it, of the asset and the user's id): never published; a proof
    -- carries its user's salt alone
    salt_key     bytea NOT NULL CHECK (octet_length(salt_key) = 32),
    root         bytea NOT NULL CHECK (octet_length(root) = 32),
    total        bigint NOT NULL CHECK (total >= 0),
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX liabilities_snapshots_latest ON liabilities_snapshots (asset, taken_at DESC, id DESC);

CREATE TRIGGER liabilities_snapshots_append_only BEFORE UPDATE OR DELETE ON liabilities_snapshots
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER liabilities_snapshots_no_truncate BEFORE TRUNCATE ON liabilities_snapshots
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- The leaves' salted id hashes, in leaf order (ascending), in blocks of
-- 1024: block b holds the id hashes of leaves 1024*b on, 32 bytes each, and
-- first_id is its first, so that a user's leaf is found by one index
-- lookup and a binary search.
CREATE TABLE liabilities_leaves (
    snapshot_id bigint NOT NULL REFERENCES liabilities_snapshots (id),
    block       integer NOT NULL CHECK (block >= 0),
    first_id    bytea NOT NULL CHECK (octet_length(first_id) = 32),
    id_hashes   bytea NOT NULL CHECK (octet_length(id_hashes) BETWEEN 32 AND 32 * 1024 AND octet_length(id_hashes) % 32 = 0),
    PRIMARY KEY (snapshot_id, block)
);
CREATE INDEX liabilities_leaves_lookup ON liabilities_leaves (snapshot_id, first_id);

-- The tree's nodes, level by level (0 = the leaves), in blocks of up to
-- 1024 consecutive nodes: block b of a level holds its nodes 1024*b on, each
-- as 32 bytes of hash and 8 of sum (unsigned, big-endian; at level 0 the
-- sum is the user's balance).
CREATE TABLE liabilities_nodes (
    snapshot_id bigint NOT NULL REFERENCES liabilities_snapshots (id),
    level       smallint NOT NULL CHECK (level >= 0),
    block       integer NOT NULL CHECK (block >= 0),
    nodes       bytea NOT NULL CHECK (octet_length(nodes) BETWEEN 40 AND 40 * 1024 AND octet_length(nodes) % 40 = 0),
    PRIMARY KEY (snapshot_id, level, block)
);

-- Hashes do not compress: store them out of line as they are.
ALTER TABLE liabilities_leaves ALTER COLUMN id_hashes SET STORAGE EXTERNAL;
ALTER TABLE liabilities_nodes ALTER COLUMN nodes SET STORAGE EXTERNAL;
