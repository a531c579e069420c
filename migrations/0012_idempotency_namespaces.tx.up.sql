-- Every stored Idempotency-Key carries its route group's prefix
-- (platform/idempotency StoredKey): "admin:" for the admin routes,
-- "platform:" for the others, so that no client key can reach into the
-- other group's records. The records stored before carry the client's key
-- as sent; they move into their namespace by the path they were used on.
UPDATE idempotency_keys
   SET key = CASE WHEN lower(path) LIKE '/v1/admin/%' THEN 'admin:' ELSE 'platform:' END || key;
