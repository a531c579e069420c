-- A sixth system account per asset, transfer: the clearing account of the
-- operator's bookings of money moved between two custodies of the same
-- coin (a Lightning channel opened from the on-chain wallet, BTC to BTC_LN;
-- a channel closed back to it, BTC_LN to BTC). An entry has one asset, so
-- such a move is two entries posted together (svc admin ledger transfer,
-- modules/ledger's Transfer): in the sending asset custody out and the
-- transfer account debited, in the receiving asset custody in and the
-- transfer account credited. Each asset's books stay balanced, each
-- custody follows its wallet, and the two transfer accounts of a pair sum
-- to zero. The account is neither custody nor owed to users, so the
-- reconciliation report's custody lines and obligations leave it out.

ALTER DOMAIN public.ledger_account_kind DROP CONSTRAINT ledger_accounts_kind_check;
ALTER DOMAIN public.ledger_account_kind ADD CONSTRAINT ledger_accounts_kind_check CHECK (VALUE IN ('user_available', 'user_hold',
    'custody', 'in_flight', 'fee_income', 'network_fees', 'suspense', 'transfer'));

INSERT INTO public.ledger_accounts (asset, kind, owner)
SELECT a.asset, 'transfer', '' FROM public.assets a
ON CONFLICT DO NOTHING;

-- Assets added later get theirs, beside the five of ledger_system_accounts.
CREATE FUNCTION public.ledger_transfer_account() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO public.ledger_accounts (asset, kind, owner) VALUES (NEW.asset, 'transfer', '')
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER ledger_transfer_account AFTER INSERT ON public.assets
    FOR EACH ROW EXECUTE FUNCTION public.ledger_transfer_account();
