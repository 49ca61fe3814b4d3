-- The node (process data dir) holding a stream's live push; NULL when not live. A process that
-- starts ends the pushes its previous run left open (CONTRACT: Live media — on start, a stream
-- left `live` by a process that died is set `idle` and gets its `stream.ended`).
ALTER TABLE streams ADD COLUMN live_node TEXT;
