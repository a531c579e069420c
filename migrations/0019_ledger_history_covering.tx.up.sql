-- A user's history reads from the index alone.
--
-- The transaction list (ledger.Transactions) takes each of the user's
-- accounts' newest postings below the cursor from the (account_id, id)
-- index, which carried the amount but not the entry: every posting of a
-- page was one more visit to the table's heap. A hot user's postings are
-- spread over the whole table, so on a ledger bigger than the server's
-- buffers a page far back read about fifty heap pages from disk or the
-- operating system's cache (docs/performance.md, "The ledger at ten
-- million postings"). With the entry id in the index too the page is an
-- index-only scan; the entries are still read, one row per posting.
--
-- The same index serves everything the old one did (derived system
-- balances, the ledger check's sums per account, the triggers' lookup of
-- an account's latest posting), eight bytes wider per posting. The new
-- index is built before the old one is dropped, so no query is without
-- one; CREATE INDEX blocks writes to the postings while it runs (26 s for
-- ten million postings on two shared cores): run this migration in a quiet
-- window on a large ledger.
CREATE INDEX ledger_postings_account_history ON ledger_postings (account_id, id) INCLUDE (amount, entry_id);
DROP INDEX ledger_postings_account;
ALTER INDEX ledger_postings_account_history RENAME TO ledger_postings_account;
