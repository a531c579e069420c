-- Which worker holds an outbound event's delivery claim, and since when.
-- A delivery job's attempt claims its event before it sends it
-- (claim_token, claimed_until: the HTTP timeout plus a minute). When the
-- worker dies mid-attempt, its job is handed back within seconds
-- (queue.DeadWorkerRescue), but the claim kept the event from every other
-- attempt until it lapsed. With the claimant named, the worker that finds
-- another dead also frees that worker's claims taken more than its grace
-- ago (event.Deliverer.ReleaseDeadClaims), and the job handed back sends at
-- once.
--
-- claimed_by is the River client ID of the worker whose job took the
-- latest claim (NULL when the attempt ran outside a worker: such a claim
-- only lapses), claimed_at when it took it. Both describe the latest claim
-- and mean nothing once claim_token is NULL.
ALTER TABLE public.outbound_events
    ADD COLUMN claimed_by text,
    ADD COLUMN claimed_at timestamptz;

-- The claims held now: a handful at any time, read by every worker's
-- dead-worker pass every few seconds.
CREATE INDEX outbound_events_claimed ON public.outbound_events (claimed_at) WHERE claim_token IS NOT NULL;
