-- A Redis that came back empty must get its snapshot back before a new job takes an id the
-- snapshot already holds, or a key is marked in it (snapshot.restore_if_empty sets the
-- marker). CREATE_AFTER's and PASS_KEY's first check; CREATE_JOB's before it marks a key
-- NO_NODES (new_job_placed.lua), which otherwise reads the marker only when its id counter
-- began (the rest of its life the marker is there: one read fewer a submit).
if redis.call("EXISTS", K.initialised) == 0 then return unmade({NOT_READY}) end
