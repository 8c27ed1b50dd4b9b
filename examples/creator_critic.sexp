;; A creator–critic loop on CreatorCriticIterator: the creator and the iterator are atoms, the critic
;; is a rule written in the DSL (short enough, and mentions the product), so the loop is cheap to
;; judge and easy to read.
;;
;;   loops run examples/creator_critic.sexp --set product="a reusable water bottle" --set max-words=12

(defatom user:create
  (params (requirements string) (context string))
  (instructions "Write a slogan that meets {{requirements}}. Background: {{context}}")
  (returns (draft string)))

(defatom user:revise
  (params (requirements string) (draft string) (feedback string))
  (instructions "Rewrite {{draft}} so that it meets {{requirements}}, fixing {{feedback}}.")
  (returns (revised string)))

(define (words text) (length (string-split text)))
(define (last items) (if (null? (cdr items)) (car items) (last (cdr items))))

(creator-critic-loop
  (max-iterations 3)
  (requirements (string-append "a slogan for " product " in at most " (to-string max-words) " words"))
  (context "The audience is commuters.")
  (creator (lambda (requirements context iteration)
             (get-field (user:create (requirements requirements) (context context)) "draft")))
  (critic (lambda (requirements draft iteration)
            (cond ((> (words draft) max-words)
                   (list #f (string-append "use at most " (to-string max-words) " words")))
                  ((not (string-contains? draft (last (string-split product))))
                   (list #f (string-append "say " (last (string-split product)))))
                  (else (list #t "")))))
  (iterator (lambda (requirements draft feedback iteration)
              (get-field (user:revise (requirements requirements) (draft draft) (feedback feedback))
                         "revised"))))
