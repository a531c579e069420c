-- What the chain says after a payout left the service's hands
-- (modules/withdrawal: withdrawal_usdt.go, withdrawal_payout.go).
--
-- A reported USDT_TRC20 transfer the TRON node does not show is counted,
-- not alerted on at once: one "not found" is a node that lags or a load
-- balancer that asked another node. The alert
-- withdrawal.usdt_transfer_missing waits until the node has missed the
-- transfer on several consecutive checks spread over at least ten
-- minutes; a check that finds it sets both columns back.
--
-- A refunded withdrawal whose payout or transaction may still confirm is
-- watched until refund_watch_until: its txid is read (the TRON node, the
-- processor's wallet) and its payout re-read, and a confirmation raises
-- withdrawal.paid_after_refund. The column is set when the hold is
-- returned, so the watch survives restarts and nothing else that touches
-- the row moves it.
ALTER TABLE public.withdrawals
    ADD COLUMN transfer_missing_since  timestamptz,
    ADD COLUMN transfer_missing_checks nonneg_int NOT NULL DEFAULT 0,
    ADD COLUMN refund_watch_until      timestamptz,
    ADD CONSTRAINT withdrawals_transfer_missing_pair
        CHECK ((transfer_missing_since IS NULL) = (transfer_missing_checks = 0)),
    ADD CONSTRAINT withdrawals_refund_watch_refunded
        CHECK (refund_watch_until IS NULL OR status = 'refunded');

-- Refunded withdrawals returned before this migration, whose payout or
-- transaction was known, are watched for fifteen days from their refund (RefundWatch).
UPDATE public.withdrawals SET refund_watch_until = updated_at + interval '15 days'
 WHERE status = 'refunded' AND (txid IS NOT NULL OR backend_ref IS NOT NULL)
   AND updated_at > now() - interval '15 days';

-- The watched ones, walked by id a page at a time.
CREATE INDEX withdrawals_refund_watch ON public.withdrawals (asset, id) WHERE refund_watch_until IS NOT NULL;
