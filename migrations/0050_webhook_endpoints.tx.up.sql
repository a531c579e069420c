-- Webhook endpoints (modules/event; docs/webhooks.md, "Webhook endpoints"):
-- URLs an operator adds beside PLATFORM_WEBHOOK_URL, each with the event
-- types it wants and a signing secret of its own, and each event's
-- delivery to each of them.
--
-- The secrets are stored sealed (AES-256-GCM under WEBHOOK_ENDPOINT_KEY,
-- which the database never sees): a copy of the database alone does not
-- reveal them. During a rotation the retired secret is kept, sealed, until
-- previous_secret_until, and deliveries carry a signature by each.
-- Endpoints are disabled, never deleted: their deliveries name them.
CREATE TABLE public.webhook_endpoints (
    id                     uuid PRIMARY KEY,
    url                    text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    -- exact event types, 'prefix.*' or '*' (checked by the service
    -- against the known types)
    events                 text[] NOT NULL CHECK (cardinality(events) BETWEEN 1 AND 64),
    description            text CHECK (length(description) <= 500),
    disabled               boolean NOT NULL DEFAULT false,
    secret_sealed          bytea NOT NULL,
    previous_secret_sealed bytea,
    previous_secret_until  timestamptz,
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    CHECK ((previous_secret_sealed IS NULL) = (previous_secret_until IS NULL))
);

-- One event's delivery to one endpoint: the same life as the event's own
-- delivery to PLATFORM_WEBHOOK_URL (outbound_events' status, attempts,
-- claim), kept apart so that each endpoint retries, dies and is
-- redelivered on its own. The rows are written by the trigger below, in
-- the transaction that inserts the event, for the endpoints enabled and
-- matching then: an event that commits has every delivery it will ever
-- have, and one that rolls back has none.
CREATE TABLE public.webhook_deliveries (
    event_id        uuid NOT NULL REFERENCES public.outbound_events (id),
    endpoint_id     uuid NOT NULL REFERENCES public.webhook_endpoints (id),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        int NOT NULL DEFAULT 0 CHECK (attempts BETWEEN 0 AND 10),
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    created_at      timestamptz NOT NULL,
    delivered_at    timestamptz,
    dead_at         timestamptz,
    redeliveries    int NOT NULL DEFAULT 0 CHECK (redeliveries >= 0),
    claim_token     uuid,
    claimed_until   timestamptz,
    claimed_by      text,
    claimed_at      timestamptz,
    PRIMARY KEY (event_id, endpoint_id),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL)),
    CHECK ((status = 'dead') = (dead_at IS NOT NULL)),
    CHECK (status <> 'dead' OR attempts = 10),
    CHECK ((claim_token IS NULL) = (claimed_until IS NULL))
);
CREATE INDEX webhook_deliveries_due ON public.webhook_deliveries (next_attempt_at, event_id, endpoint_id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_status ON public.webhook_deliveries (endpoint_id, status, created_at DESC);
CREATE INDEX webhook_deliveries_status ON public.webhook_deliveries (status, created_at DESC) WHERE status <> 'delivered';
CREATE INDEX webhook_deliveries_claimed ON public.webhook_deliveries (claimed_at) WHERE claim_token IS NOT NULL;

-- Whether an endpoint's filters take an event type: the type itself, '*',
-- or 'prefix.*' for every type beginning with 'prefix.'.
CREATE FUNCTION public.webhook_filter_matches(filters text[], typ text) RETURNS boolean LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM unnest(filters) f
                    WHERE f = typ OR f = '*' OR (f LIKE '%.*' AND starts_with(typ, left(f, -1))))
$$;

CREATE FUNCTION public.outbound_events_fan_out() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO public.webhook_deliveries (event_id, endpoint_id, status, attempts, next_attempt_at, created_at)
    SELECT NEW.id, w.id, 'pending', 0, NEW.next_attempt_at, NEW.created_at
      FROM public.webhook_endpoints w
     WHERE NOT w.disabled AND public.webhook_filter_matches(w.events, NEW.type);
    RETURN NULL;
END $$;
CREATE TRIGGER outbound_events_fan_out AFTER INSERT ON public.outbound_events
    FOR EACH ROW EXECUTE FUNCTION public.outbound_events_fan_out();
