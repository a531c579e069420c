-- transfer_assets_usable checks, inside a transfer's transaction, what a
-- transfer created without reading the assets first (modules/transfer,
-- transfer_fast.go) takes from its copy of them: every asset its legs
-- name (p_assets, each once) exists, is enabled, and has the decimals of
-- the copy (p_decimals, in the same order), which the answer's amounts
-- were written with. It raises SV003 otherwise, which fails the
-- transaction: nothing is written, and the transfer is made the ordinary
-- way, which reads the assets and gives the refusal (an unknown asset, a
-- disabled one) or the transfer.
CREATE FUNCTION public.transfer_assets_usable(p_assets text[], p_decimals integer[]) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF (SELECT count(*)
          FROM unnest(p_assets, p_decimals) AS v (asset, decimals)
          JOIN public.assets a ON a.asset = v.asset AND a.enabled AND a.decimals = v.decimals)
       <> cardinality(p_assets) THEN
        RAISE EXCEPTION 'transfer_assets_usable: an asset of the transfer is unknown, disabled, or not as copied'
            USING ERRCODE = 'SV003';
    END IF;
    RETURN true;
END $$;
