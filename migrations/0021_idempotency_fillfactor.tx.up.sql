-- Room on each page of idempotency_keys for the completion of the keys it
-- holds: a key is claimed (INSERT) and completed with its response
-- (UPDATE) moments later, and with full pages about half of those updates
-- found no room on the row's page, so the new version went elsewhere and
-- both indexes got an entry for it. With two fifths of each page kept free
-- for updates every completion measured was a heap-only update (no index
-- entry, less WAL), at no cost in table size: the completed rows fill the
-- space that was kept. Existing pages keep their layout; new ones follow.
ALTER TABLE idempotency_keys SET (fillfactor = 60);
