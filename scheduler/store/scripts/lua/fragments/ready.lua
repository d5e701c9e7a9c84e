-- A Redis that came back empty must get its snapshot back before a new job takes an id the
-- snapshot already holds, or a key is marked in it (snapshot.restore_if_empty sets the
-- marker). CREATE_JOB's, CREATE_AFTER's and PASS_KEY's first check.
if redis.call("EXISTS", K.initialised) == 0 then return unmade({NOT_READY}) end
