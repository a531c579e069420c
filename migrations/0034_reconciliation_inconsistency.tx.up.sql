-- Reconciliation (modules/reconcile): an inconsistent ledger halts the
-- withdrawals of the assets it concerns, as an insolvency does, and an
-- acknowledgement accepts what it saw rather than muting the asset.

-- inconsistency: the ledger check found an unbalanced entry, a drift
-- between a balance and its postings, a negative balance or a hold that is
-- not its open withdrawals' gross, for the asset.
ALTER TABLE reconciliation_episodes DROP CONSTRAINT reconciliation_episodes_kind_check;
ALTER TABLE reconciliation_episodes ADD CONSTRAINT reconciliation_episodes_kind_check
    CHECK (kind IN ('insolvency', 'inconsistency', 'gas_low'));

-- What the latest report applied to the open episode found, and what the
-- operator's acknowledgement accepted: the shortfall of an insolvency, in
-- the asset's smallest units ((user_obligations - expected_shortfall) -
-- chain_balance, positive while insolvent), and the number of findings of
-- an inconsistency. A later report that finds more than was accepted ends
-- the acknowledged episode and opens a new one (a new halt, a new alert);
-- an acknowledgement that recorded no figure accepted nothing.
ALTER TABLE reconciliation_episodes
    ADD COLUMN shortfall bigint,
    ADD COLUMN acked_shortfall bigint,
    ADD COLUMN findings bigint,
    ADD COLUMN acked_findings bigint;

-- Why withdrawals_halted_since is set: the kinds of the asset's open,
-- unacknowledged episodes that halt (insolvency, inconsistency), in order.
ALTER TABLE assets ADD COLUMN withdrawals_halted_by text[];
UPDATE assets SET withdrawals_halted_by = '{insolvency}' WHERE withdrawals_halted_since IS NOT NULL;
