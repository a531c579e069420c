-- Idempotency-Keys are scoped by route group (platform/idempotency
-- StoredKey): an admin route's record is stored as "admin:" and the
-- client's key, so a stored key is up to 6 characters longer than the
-- 255 a client may send.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_key_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_key_check CHECK (length(key) BETWEEN 1 AND 300);
