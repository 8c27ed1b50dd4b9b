;; A director–evaluator loop (seed 001) on DirectorExecutorEvaluatorController.
;;
;; The director atom turns the goal (or the controller's next input) into a plan; the executor atom
;; carries it out; the evaluator is plain DSL code (the result must mention every keyword); the
;; controller stops on PASS and otherwise asks the director again with what was missing.
;;
;;   loops run examples/director_loop.sexp --set goal="Describe a teapot" --set keywords="spout handle"

(defatom user:direct
  (params (goal string) (iteration int))
  (instructions "Write a one-line plan for {{goal}}. This is attempt {{iteration}}.")
  (returns (plan string)))

(defatom user:execute
  (params (plan string))
  (instructions "Carry out {{plan}} and write the result in two sentences.")
  (returns (result string)))

(define (missing-words text words)
  (cond ((null? words) '())
        ((string-contains? text (car words)) (missing-words text (cdr words)))
        (else (cons (car words) (missing-words text (cdr words))))))

(director-evaluator-loop
  (max-iterations 3)
  (initial-director-input goal)
  (director (lambda (input iteration)
              (get-field (user:direct (goal input) (iteration iteration)) "plan")))
  (executor (lambda (plan iteration)
              (get-field (user:execute (plan plan)) "result")))
  (evaluator (lambda (result plan iteration)
               (let ((missing (missing-words result (string-split keywords " "))))
                 (if (null? missing)
                     (list (list 'status "PASS"))
                     (list (list 'status "FAIL") (list 'missing missing))))))
  (controller (lambda (feedback plan result iteration)
                (if (equal? (get-field feedback "status") "PASS")
                    (list 'stop result)
                    (list 'continue (string-append (get-field *loop-config* "initial-director-input")
                                                   ". Mention: " (string-join (get-field feedback "missing") ", ")))))))
