-- Reconciliation (modules/reconcile): the reports, kept as history, and the
-- episodes they open and close (an asset insolvent, the hot wallet's gas
-- low).

-- Set while an unacknowledged insolvency episode of the asset is open: new
-- withdrawals of it wait for an operator and none is submitted. On the
-- asset's row because every withdrawal request reads that row already.
ALTER TABLE assets ADD COLUMN withdrawals_halted_since timestamptz;

CREATE TABLE reconciliation_reports (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL,
    -- hourly (the worker's job) or on_demand (the admin endpoint, the CLI)
    trigger    text NOT NULL CHECK (trigger IN ('hourly', 'on_demand')),
    healthy    boolean NOT NULL,
    report     jsonb NOT NULL
);
CREATE INDEX reconciliation_reports_created ON reconciliation_reports (created_at DESC, id DESC);

CREATE TABLE reconciliation_episodes (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('insolvency', 'gas_low')),
    asset      text NOT NULL,
    started_at timestamptz NOT NULL,
    detail     text NOT NULL,
    -- the report that opened it (insolvency)
    report_id  bigint REFERENCES reconciliation_reports (id),
    -- an operator who looked: an acknowledged insolvency no longer halts
    -- withdrawals, and a new episode opens only after a clean report
    acked_at   timestamptz,
    acked_by   text,
    ended_at   timestamptz,
    CHECK ((acked_at IS NULL) = (acked_by IS NULL))
);
-- At most one open episode of a kind per asset.
CREATE UNIQUE INDEX reconciliation_episodes_open ON reconciliation_episodes (kind, asset) WHERE ended_at IS NULL;
