"""The PostgreSQL protocol front-end (docs/wire.md): psql, drivers and BI tools, through the pipeline of
POST /v1/query. messages (the codec), pgtypes (types on the wire), catalog (pg_catalog emulated from the
policy), session (SET/SHOW dp.*, statements answered here), answers (the bridge to the pipeline), server.
"""
