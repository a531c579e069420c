-- The rules of the withdrawals table's single columns become domains
-- (docs/performance.md, "The rules of a column as its type").
--
-- PostgreSQL reads a table's CHECK constraints back from their stored text
-- at every statement that writes the table, where it keeps a domain's
-- compiled for the session. With sixteen of them, that reading was a
-- measurable part of every withdrawal's insert and of every update of its
-- status. The twelve that look at one column are now that column's type;
-- the four that tie columns together stay CHECK constraints. The rules are
-- the same, and a value that breaks one is refused as before (SQLSTATE
-- 23514, check_violation), now naming the domain's constraint.
--
-- Each column first takes a domain without a rule, which needs no rewrite
-- of the table (the domain's base type is the column's), then the rule is
-- added to the domain, which checks the rows already there, and the
-- table's CHECK dropped.

CREATE DOMAIN withdrawal_status AS text;
CREATE DOMAIN withdrawal_fee_mode AS text;
CREATE DOMAIN withdrawal_approval_mode AS text;
CREATE DOMAIN withdrawal_destination AS text;
CREATE DOMAIN external_user_id AS text;
CREATE DOMAIN release_attestation AS text;
CREATE DOMAIN positive_bigint AS bigint;
CREATE DOMAIN nonneg_int AS integer;

ALTER TABLE withdrawals
    ALTER COLUMN status TYPE withdrawal_status,
    ALTER COLUMN fee_mode TYPE withdrawal_fee_mode,
    ALTER COLUMN approval_mode TYPE withdrawal_approval_mode,
    ALTER COLUMN destination TYPE withdrawal_destination,
    ALTER COLUMN external_user_id TYPE external_user_id,
    ALTER COLUMN release_attestation TYPE release_attestation,
    ALTER COLUMN amount_gross TYPE positive_bigint,
    ALTER COLUMN amount_net TYPE positive_bigint,
    ALTER COLUMN fee_estimate TYPE nonneg_bigint,
    ALTER COLUMN fee TYPE nonneg_bigint,
    ALTER COLUMN network_fee TYPE nonneg_bigint,
    ALTER COLUMN submit_attempts TYPE nonneg_int;

ALTER DOMAIN withdrawal_status ADD CONSTRAINT withdrawal_status_check CHECK (VALUE IN ('requested', 'pending_approval',
    'approved', 'rejected', 'submitting', 'submitted', 'broadcast', 'confirmed', 'failed', 'refunded'));
ALTER DOMAIN withdrawal_fee_mode ADD CONSTRAINT withdrawal_fee_mode_check CHECK (VALUE IN ('deduct', 'absorb'));
ALTER DOMAIN withdrawal_approval_mode ADD CONSTRAINT withdrawal_approval_mode_check CHECK (VALUE IN ('auto', 'manual'));
ALTER DOMAIN withdrawal_destination ADD CONSTRAINT withdrawal_destination_check CHECK (char_length(VALUE) BETWEEN 1 AND 2048);
ALTER DOMAIN external_user_id ADD CONSTRAINT external_user_id_check CHECK (char_length(VALUE) BETWEEN 1 AND 255);
ALTER DOMAIN release_attestation ADD CONSTRAINT release_attestation_check CHECK (char_length(VALUE) BETWEEN 10 AND 2000);
ALTER DOMAIN positive_bigint ADD CONSTRAINT positive_bigint_check CHECK (VALUE > 0);
ALTER DOMAIN nonneg_int ADD CONSTRAINT nonneg_int_check CHECK (VALUE >= 0);

ALTER TABLE withdrawals
    DROP CONSTRAINT withdrawals_status_check,
    DROP CONSTRAINT withdrawals_fee_mode_check,
    DROP CONSTRAINT withdrawals_approval_mode_check,
    DROP CONSTRAINT withdrawals_destination_check,
    DROP CONSTRAINT withdrawals_external_user_id_check,
    DROP CONSTRAINT withdrawals_release_attestation_check,
    DROP CONSTRAINT withdrawals_amount_gross_check,
    DROP CONSTRAINT withdrawals_amount_net_check,
    DROP CONSTRAINT withdrawals_fee_estimate_check,
    DROP CONSTRAINT withdrawals_fee_check,
    DROP CONSTRAINT withdrawals_network_fee_check,
    DROP CONSTRAINT withdrawals_submit_attempts_check;
