;; The core language in one page: definitions, closures, tail recursion, records and `map`.
;;
;;   loops run examples/plain_language.sexp --set n=10

(define (make-counter)
  (let ((count 0))
    (lambda () (set! count (+ count 1)) count)))

(define tick (make-counter))
(tick)
(tick)

;; A tail-recursive loop runs in constant Python stack, however long it runs.
(define (sum-to k total)
  (if (= k 0) total (sum-to (- k 1) (+ total k))))

(define person (list (list 'name "Ada") (list 'born 1815)))

(list (list 'ticks (tick))
      (list 'sum (sum-to n 0))
      (list 'squares (map (lambda (x) (* x x)) (list 1 2 3)))
      (list 'greeting (string-append "Hello, " (get-field person "name") "!"))
      (list 'missing (get-field person "died")))
