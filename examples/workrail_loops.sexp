;; The Workrail loops (seed 003): while, until, for and for-each, each with its safety limits.
;; No LM: every loop here is plain DSL code. A loop that reaches a limit ends with its last value and
;; a warning; it does not raise.
;;
;;   loops run examples/workrail_loops.sexp --set target=100

;; while: double until the target is passed, at most 20 rounds.
(define value 1)
(while (< value target) :max-iterations 20
  (set! value (* value 2)))

;; until: count down to zero.
(define countdown 5)
(until (= countdown 0)
  (set! countdown (- countdown 1)))

;; for: the sum of the even numbers below 10.
(define evens 0)
(for (i 0 10 2)
  (set! evens (+ evens i)))

;; for-each: number the items (item and index).
(define numbered '())
(for-each (fruit position (list "apple" "pear" "plum"))
  (set! numbered (append numbered (list (string-append (to-string (+ position 1)) ". " fruit)))))

;; A limit that holds: this while would run forever; it stops at 3 iterations with a warning.
(define spins 0)
(while #t :max-iterations 3
  (set! spins (+ spins 1)))

(list (list 'value value) (list 'countdown countdown) (list 'evens evens) (list 'numbered numbered)
      (list 'spins spins))
