-- idempotency_claim claims a new Idempotency-Key in one statement of its
-- own: it inserts the in-flight record and reports whether it did (false:
-- the key exists, and the caller takes the slow path that reads it).
--
-- Its commit does not wait for the WAL flush. Nothing is lost by that: the
-- record only matters together with the request's effect, whose own commit
-- comes later in the WAL and flushes the claim with it; a claim lost in a
-- crash belonged to an attempt that died in the same crash, and the retry
-- claims the key again. Every mutating request saves a synchronous flush and
-- two round trips.
CREATE FUNCTION idempotency_claim(p_key text, p_method text, p_path text, p_hash bytea, p_token uuid, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'idempotency_claim must run in a transaction of its own';
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO idempotency_keys (key, method, path, request_hash, state, lock_token, locked_at, created_at)
    VALUES (p_key, p_method, p_path, p_hash, 'in_flight', p_token, p_now, p_now)
    ON CONFLICT (key) DO NOTHING;
    RETURN FOUND;
END $$;
