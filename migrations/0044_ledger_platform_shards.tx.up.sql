-- A platform account's available balance kept in shards (modules/ledger,
-- PlatformShards): shard 0 is the account's own row (owner = its name),
-- shard k (1 to 63) the row whose owner is name#k. '#' is outside the
-- names' alphabet, so no platform account is ever named as a shard. Each
-- shard is an ordinary materialized account under every guard of
-- migrations 0014, 0025, 0029 and 0033. One entry kind: shard_sweep, the
-- shards gathered into the account's row before a debit.
--
-- The rules only grow and are added NOT VALID, which checks every new
-- value and reads no existing row; 0047 validates the owner rule outside
-- this transaction (a validation here would scan the accounts under the
-- ACCESS EXCLUSIVE lock the ALTER took, stopping the postings). A lock not
-- had at once fails the migration after five seconds (svc migrate runs it
-- again).
SET LOCAL lock_timeout = '5s';

ALTER DOMAIN public.ledger_entry_kind DROP CONSTRAINT ledger_entries_kind_check;
ALTER DOMAIN public.ledger_entry_kind ADD CONSTRAINT ledger_entries_kind_check CHECK (VALUE IN ('deposit_credit', 'withdrawal_hold',
    'withdrawal_release', 'payout_broadcast', 'payout_settle', 'correction',
    'transfer', 'escrow_hold', 'escrow_capture', 'escrow_release', 'shard_sweep')) NOT VALID;

ALTER TABLE public.ledger_accounts
    DROP CONSTRAINT ledger_accounts_owner,
    ADD CONSTRAINT ledger_accounts_owner CHECK (CASE
        WHEN kind IN ('user_available', 'user_hold', 'user_escrow') THEN char_length(owner) BETWEEN 1 AND 255
        WHEN kind = 'platform_available' THEN owner ~ '^[a-z0-9_.:-]{1,64}(#([1-9]|[1-5][0-9]|6[0-3]))?$'
        WHEN kind IN ('platform_hold', 'platform_escrow') THEN owner ~ '^[a-z0-9_.:-]{1,64}$'
        ELSE owner = '' END) NOT VALID;
