-- The SQL edition has no fence clock (its fences come from idem.fence_seq) and creates no trigger that runs this.
BEGIN
    RETURN NULL;
END
