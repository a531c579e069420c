-- Payouts through the processor (modules/withdrawal, withdrawal_payout.go):
-- the submitter's claim and its retries, and what the payout cost.

ALTER TABLE withdrawals
    -- How many times a submitter claimed the withdrawal. Above zero, a
    -- processor payout may exist: every later attempt, and a release, asks
    -- the processor for payouts carrying the withdrawal's id first.
    ADD COLUMN submit_attempts integer NOT NULL DEFAULT 0 CHECK (submit_attempts >= 0),
    -- The submitter holding the claim (one executor); NULL when none does.
    ADD COLUMN claim_token     uuid,
    -- When the submitter may (next) work on the withdrawal: the end of a
    -- claim (a crashed submitter's claim is taken over after it), or the
    -- time of a retry after an ambiguous failure. NULL: at once.
    ADD COLUMN next_attempt_at timestamptz,
    -- When the processor accepted the payout (the Lightning deadline counts
    -- from here).
    ADD COLUMN submitted_at    timestamptz,
    -- The network fee the payout actually paid (on chain: the transaction's
    -- fee, or this payout's share of a batch), known once it is broadcast.
    ADD COLUMN network_fee     bigint CHECK (network_fee >= 0),
    ADD CONSTRAINT withdrawals_claim_only_submitting CHECK (claim_token IS NULL OR status = 'submitting');

-- A processor payout belongs to one withdrawal; webhooks find it by id.
CREATE UNIQUE INDEX withdrawals_backend_ref ON withdrawals (backend_ref) WHERE backend_ref IS NOT NULL;
