-- idempotency_require_claim raises when a request's claim on its
-- Idempotency-Key was lost (a newer attempt took the key over), for a
-- handler that stores its response in the same pipelined implicit
-- transaction as its effect: the raise rolls the effect back, as the
-- ErrLost of an ordinary transaction does. Without it the effect would
-- commit while the key answers whatever the newer attempt stored, for
-- example a 422, forever.
CREATE FUNCTION idempotency_require_claim(completed boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT completed THEN
        RAISE EXCEPTION 'idempotency key taken over by a newer attempt' USING ERRCODE = 'SV001';
    END IF;
    RETURN true;
END $$;
