-- The shards of the platform accounts that existed before their available
-- balance was kept in shards (0044; modules/ledger, PlatformShards): a
-- platform account's first credit in an asset creates all 64 rows, so that
-- no shard appears after a debit locked the account's rows. The accounts
-- created before 0044 have shard 0 only: their other 63 rows are created
-- here, with balance 0 (an empty account, no posting: the guards of 0014
-- accept it), and no existing row is touched.
INSERT INTO public.ledger_accounts (asset, kind, owner, balance)
SELECT a.asset, 'platform_available', a.owner || '#' || k, 0
  FROM public.ledger_accounts a
 CROSS JOIN generate_series(1, 63) AS k
 WHERE a.kind = 'platform_available' AND strpos(a.owner, '#') = 0
 ORDER BY a.asset, a.owner, k
ON CONFLICT (owner, asset, kind) DO NOTHING;
