-- BTCPay's on-chain payout processor sends every payout that is ready in
-- one transaction, so one BTC txid can pay several withdrawals. The unique
-- (asset, txid) index of 0007 refused the second withdrawal of such a
-- batch at its broadcast: it stayed submitted, retried without end, while
-- its money had left the wallet. Uniqueness stays where one transaction
-- pays one withdrawal: a TRC-20 transfer has one recipient, and a
-- Lightning payment (its hash is the txid) pays one invoice. A BTC txid is
-- never looked up, so it needs no index of its own.
DROP INDEX withdrawals_txid;
CREATE UNIQUE INDEX withdrawals_txid ON withdrawals (asset, txid) WHERE txid IS NOT NULL AND asset <> 'BTC';
