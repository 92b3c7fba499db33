BEGIN
    IF method IS NULL THEN
        PERFORM idem.null_argument('method', 'Pass the HTTP method, such as ''POST''.');
    END IF;
    IF path IS NULL THEN
        PERFORM idem.null_argument('path', 'Pass the request path, such as ''/v1/charges''.');
    END IF;
    RETURN idem.request_hash_of_request(method, path, body);
END
