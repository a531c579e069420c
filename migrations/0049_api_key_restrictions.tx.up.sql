-- API key restrictions (modules/apikey; docs/operations.md, "API keys").
--
-- The scope read_only: a key that may only read (GET) the platform
-- routes. And a key's allow-list of client networks: empty, the key is
-- accepted from anywhere; otherwise only from an address inside one of
-- them (the TCP peer, or the address a trusted proxy forwarded:
-- TRUSTED_PROXIES). The admin who mints a key signs both.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_scope_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_scope_check CHECK (scope IN ('read_only', 'readwrite', 'admin'));
ALTER TABLE api_keys ADD COLUMN allowed_cidrs cidr[] NOT NULL DEFAULT '{}'
    CHECK (array_position(allowed_cidrs, NULL) IS NULL AND cardinality(allowed_cidrs) <= 64);
