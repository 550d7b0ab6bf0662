-- The minimal write floor's tables (bench/floor/README.md): a key, a payment and an event table
-- shaped like the service's (the same kinds of columns and the indexes a payment service needs),
-- without Django, constraints beyond the keys, or anything the floor does not write.
DROP TABLE IF EXISTS floor_event, floor_payment, floor_idem;

CREATE TABLE floor_idem (
  id bigserial PRIMARY KEY,
  merchant_id int NOT NULL,
  key text NOT NULL,
  method text,
  route text,
  fingerprint text NOT NULL,
  status text NOT NULL,
  locked_at timestamptz,
  payment_id bigint,
  response_code int,
  response_headers jsonb,
  response_body bytea,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  UNIQUE (merchant_id, key)
);
CREATE INDEX ON floor_idem (expires_at);

CREATE TABLE floor_payment (
  id bigserial PRIMARY KEY,
  public_id text UNIQUE NOT NULL,
  merchant_id int NOT NULL,
  amount bigint NOT NULL,
  currency char(3) NOT NULL,
  status text NOT NULL,
  payment_method text,
  reference text,
  acquirer_reference text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON floor_payment (merchant_id, created_at DESC);
CREATE INDEX ON floor_payment (status);

CREATE TABLE floor_event (
  id bigserial PRIMARY KEY,
  payment_id bigint NOT NULL REFERENCES floor_payment (id),
  kind text NOT NULL,
  data jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON floor_event (payment_id);
