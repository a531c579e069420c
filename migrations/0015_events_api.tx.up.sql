-- The Events API (GET /v1/events): the platform reads the events it is
-- sent as one stream, in an order in which nothing can appear behind a
-- reader that has already passed it.
--
-- Events are written inside the transactions of the changes they report,
-- so they commit in an order their created_at and id (both taken at write
-- time) do not follow: a transaction that writes first can commit last. A
-- list ordered by (created_at, id) would then show the platform an event
-- before an earlier one commits, and a platform that goes on from the id it
-- has read would never see the earlier one.
--
-- xact_id is the id of the transaction that wrote the event (set by the
-- default, so every writer gets it without saying so). The list shows only
-- events whose transaction id is below the xmin of the reading statement's
-- snapshot: every transaction with a smaller id has ended by then, so every
-- event that can ever sort before a listed one is already committed and
-- listed too, and whatever commits later sorts after it. The stream order
-- is (xact_id, id); the events of one transaction commit together and are
-- ordered by their (time-ordered) id.
--
-- Existing events get the id of this migration's transaction (one value,
-- stored once: the default is not volatile), which sorts them before every
-- event written after it; among themselves they follow their ids.
ALTER TABLE outbound_events ADD COLUMN xact_id xid8 NOT NULL DEFAULT pg_current_xact_id();

-- The stream, and the stream of one type.
CREATE INDEX outbound_events_stream ON outbound_events (xact_id, id);
CREATE INDEX outbound_events_type_stream ON outbound_events (type, xact_id, id);

-- An event's place in the stream never changes either: the guard of 0003,
-- with xact_id added.
CREATE OR REPLACE FUNCTION outbound_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'outbound events are never deleted (event %)', OLD.id;
    END IF;
    IF NEW.id <> OLD.id OR NEW.type <> OLD.type OR NEW.created_at <> OLD.created_at
       OR NEW.payload::text <> OLD.payload::text OR NEW.xact_id <> OLD.xact_id THEN
        RAISE EXCEPTION 'the id, type, created_at, payload and xact_id of an outbound event never change (event %)', OLD.id;
    END IF;
    RETURN NEW;
END
$$;
