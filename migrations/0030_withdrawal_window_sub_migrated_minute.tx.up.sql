-- withdrawal_window_sub as migration 0027 should have written it. A
-- withdrawal counted in withdrawal_volume before 0027 ran, in the minute
-- 0027 ran in, is not in the open bucket that minute then became: the open
-- bucket may hold less than the withdrawal, and taking it out there was
-- refused (open_gross may not go negative), so a return of its money
-- (reject, release, a failed payout) failed until the minute closed. Now
-- such a return comes out of the withdrawal's row of withdrawal_volume.
-- The fix is a migration of its own, not an edit of 0027, so that it
-- reaches every database that already ran 0027.
--
-- withdrawal_window_add and withdrawal_reserve_auto (0027) share the
-- statement that counts a withdrawal into the open bucket: a change to one
-- is a change to the other.
CREATE OR REPLACE FUNCTION withdrawal_window_sub(p_asset text, p_minute timestamptz, p_gross bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_expired boolean;
BEGIN
    UPDATE withdrawal_windows SET open_gross = open_gross - p_gross, total = total - p_gross
     WHERE asset = p_asset AND open_minute = p_minute AND open_gross >= p_gross;
    IF FOUND THEN
        RETURN;
    END IF;
    PERFORM 1 FROM withdrawal_windows WHERE asset = p_asset FOR UPDATE;
    UPDATE withdrawal_volume SET gross = gross - p_gross
     WHERE asset = p_asset AND minute = p_minute
    RETURNING expired INTO v_expired;
    IF FOUND AND NOT v_expired THEN
        UPDATE withdrawal_windows SET total = total - p_gross WHERE asset = p_asset;
    END IF;
END $$;
